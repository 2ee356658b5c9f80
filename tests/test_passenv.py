"""The allow-listed environment of delegated agents and script tools (pure: no processes)."""

from __future__ import annotations

import pytest

from scvd import passenv

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "AKIA0000", "AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_SESSION_TOKEN": "sess",
    "GH_TOKEN": "ghp_x", "GITHUB_TOKEN": "ghs_x", "DATABASE_URL": "postgres://u:p@h/db",
    "SSH_AUTH_SOCK": "/tmp/ssh-x/agent.1", "OPENAI_API_KEY": "sk-x", "NPM_TOKEN": "npm_x",
    "KUBECONFIG": "/home/me/.kube/config", "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1/bus",
}
RUNNING = {
    "PATH": "/usr/bin", "LANG": "C.UTF-8", "LANGUAGE": "en", "LC_ALL": "C.UTF-8", "LC_TIME": "C",
    "TERM": "xterm", "TZ": "UTC", "TMPDIR": "/tmp/me", "USER": "me", "LOGNAME": "me", "SHELL": "/bin/bash",
    "http_proxy": "http://p:3128", "HTTPS_PROXY": "http://p:3128", "no_proxy": "localhost",
    "ALL_PROXY": "socks5://p:1080", "SSL_CERT_FILE": "/etc/ca.pem", "SSL_CERT_DIR": "/etc/ssl/certs",
    "REQUESTS_CA_BUNDLE": "/etc/ca.pem", "CURL_CA_BUNDLE": "/etc/ca.pem", "NODE_EXTRA_CA_CERTS": "/etc/ca.pem",
}


def test_only_the_allow_list_passes() -> None:
    assert passenv.build({**CREDENTIALS, **RUNNING, "HOME": "/home/me", "EDITOR": "vi"}) == RUNNING


def test_pass_env_names_pass_and_set_wins() -> None:
    env = passenv.build({**CREDENTIALS, **RUNNING}, ["GH_TOKEN", "MISSING"], set={"PATH": "/own", "X": "1"})
    assert env == {**RUNNING, "GH_TOKEN": "ghp_x", "PATH": "/own", "X": "1"}


def test_scvd_and_systemd_variables_never_pass_even_when_listed() -> None:
    base = {"SCV_SOCKET": "/s", "SCVD_LOG_LEVEL": "debug", "NOTIFY_SOCKET": "/n", "LISTEN_FDS": "1"}
    assert passenv.build(base, list(base)) == {}


def test_names_are_case_sensitive() -> None:
    assert passenv.build({"path": "/x", "Lc_ALL": "C", "Http_Proxy": "h"}) == {}


def test_passed_lists_the_set_names_in_config_order() -> None:
    assert passenv.passed(CREDENTIALS, ["GITHUB_TOKEN", "AWS_PROFILE", "GH_TOKEN"]) == ["GITHUB_TOKEN", "GH_TOKEN"]


@pytest.mark.parametrize("name,problem", [
    ("AWS_PROFILE", None),
    ("_x9", None),
    ("AWS-PROFILE", "'AWS-PROFILE' is not an environment variable name"),
    ("9LIVES", "'9LIVES' is not an environment variable name"),
    ("", "'' is not an environment variable name"),
    ("A=B", "'A=B' is not an environment variable name"),
    ("SCV_SOCKET", "SCV_SOCKET is scvd's own or systemd's variable, which no child gets"),
    ("NOTIFY_SOCKET", "NOTIFY_SOCKET is scvd's own or systemd's variable"),
    ("HOME", "HOME is set by scvd itself (the agent's private home)"),
])
def test_name_problem(name: str, problem: str | None) -> None:
    found = passenv.name_problem(name, reserved={"HOME"})
    assert (found is None) if problem is None else (found is not None and found.startswith(problem))


def test_a_passed_value_that_reads_like_a_credential_is_picked_for_hiding() -> None:
    """By its name (any value of 4+ characters), or by a token's shape; names of things and paths stay."""
    base = {"GH_TOKEN": "ghp_x", "DB_PASS": "hunter2", "GOOGLE_APPLICATION_CREDENTIALS": "/home/me/sa.json",
            "DEPLOY_HOOK": "https://hooks.example.com/T0/Zk3jH8sQ2mP9vX4cB7nW", "PIN_CODE": "4711",
            "AWS_PROFILE": "work-profile-7c1f", "RUN_ID": "123e4567-e89b-12d3-a456-426614174000",
            "KUBECONFIG": "/home/me/.kube/config2024abcdefghij", "PAGER": "less", "KEYMAP": "de-latin1-nodeadkeys",
            "API_KEY": "abc", "API_BASE": "https://api.example.com/v1/projects/42"}
    assert passenv.credentials(base, [*base, "MISSING"]) == {
        k: base[k] for k in ("GH_TOKEN", "DB_PASS", "GOOGLE_APPLICATION_CREDENTIALS", "DEPLOY_HOOK")}


def test_a_desktop_sessions_and_sockets_names_are_no_credentials() -> None:
    """`SESSION` and `AUTH` as a part of a name hid these whole (`user`, `wayland`, a socket) from every
    output: only a name that is `auth`, `session` ... itself (a url's query) reads like a credential's."""
    base = {"SSH_AUTH_SOCK": "/run/user/1000/ssh-agent.sock", "XDG_SESSION_TYPE": "wayland",
            "XDG_SESSION_CLASS": "user", "DESKTOP_SESSION": "gnome", "ACCESS_LOG": "/var/log/app/access.log",
            "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus", "SESSION": "s-1f2e3d4c"}
    assert passenv.credentials(base, list(base)) == {"SESSION": "s-1f2e3d4c"}


def test_a_urls_password_is_picked_alone_under_any_name_and_in_a_proxy_every_child_gets() -> None:
    """`HTTPS_PROXY=http://user:PASSWORD@proxy` showed whole: no token's body in it, a name that says
    nothing. Its password is hidden (as written and decoded), the user and the proxy still read."""
    base = {"HTTPS_PROXY": "http://user:s3cretpass@proxy:3128", "http_proxy": "http://proxy:3128",
            "DATABASE_URL": "postgres://app:p%40ss-word@db/app", "MIRROR": "https://me@mirror.example.com/x",
            "DB_PASS_URL": "mysql://root:hunter22@db", "SHORT": "http://u:pw@host"}
    assert passenv.credentials(base, ["DATABASE_URL", "MIRROR", "DB_PASS_URL", "SHORT"]) == {
        "HTTPS_PROXY password": "s3cretpass",  # allowed, not listed: only its URL's password
        "DATABASE_URL password": "p%40ss-word", "DATABASE_URL password 2": "p@ss-word",
        "DB_PASS_URL": "mysql://root:hunter22@db", "DB_PASS_URL password": "hunter22"}
