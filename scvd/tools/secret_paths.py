"""The secret-like path rule: which workspace paths a `read` must not do unasked.

Rule: purely lexical and case-insensitive, applied to every component of the
path, so a file inside a directory named like a secret (`.ssh/config`,
`secrets/db.yaml`) counts too, and so does a name that holds a secret's word
(git's XDG credential store `.config/git/credentials` by `credential`, as
`.git-credentials` by its name); a few common names count only in their
directory (`.docker/config.json`), and a few words only as a whole word of a file's
name that is no source or doc file (`token.txt`, `gh_token`, not `tokenizer.py`,
`src/token.rs` or `reset_password.html`). The workspace's own real path counts for the
credentials folders (a session on `~/.kube` asks for `config`, on `~/.docker` for
`config.json`), judged once per workspace. The file tools apply it to the requested path
and to the one a symlink resolves to (`notes -> .env`). It raises a read's risk so a person sees it; it
is a visibility aid, not a confidentiality boundary (seed 000): a shell or a
delegated agent can still read the file, so isolation needs the OS sandbox.
"""

from __future__ import annotations

import functools
import re
from typing import Iterable

KUBECONFIG = "a Kubernetes config that holds cluster client keys or tokens"
CODEX_CONFIG = "a Codex config that may hold a provider's bearer token"
# exact file names (lower case) that hold credentials by convention
SECRET_NAMES = {
    ".env": "a dotenv file",
    ".netrc": "a netrc credentials file",
    ".npmrc": "an npm config that may hold a token",
    ".pypirc": "a PyPI config that may hold a token",
    ".git-credentials": "a git credential store",
    ".envrc": "a direnv file that usually exports tokens",
    ".pgpass": "a PostgreSQL password file",
    ".vault-token": "a HashiCorp Vault token",
    ".htpasswd": "an Apache password file",
    "auth.json": "a credentials file (Codex and others keep their sign-in in one)",
    ".claude.json": "Claude Code's state, which may hold its API key (primaryApiKey)",
    ".my.cnf": "a MySQL client config that may hold a password",
    ".s3cfg": "an s3cmd config that holds access keys",
    ".boto": "a boto/gsutil config that may hold credentials",
    "rclone.conf": "an rclone config that holds its remotes' tokens",
    "kubeconfig": KUBECONFIG,
    "kubeconfig.yaml": KUBECONFIG,
    "kubeconfig.yml": KUBECONFIG,
    ".dockercfg": "a legacy Docker config that holds registry credentials",
    ".terraformrc": "a Terraform CLI config that may hold Terraform Cloud tokens",
    "wallet.dat": "a cryptocurrency wallet",
    # procfs's, copied or mirrored (a bug report's bundle, a FUSE view of /proc); procfs itself asks by
    # its device (scvd/tools/procfs.py)
    "environ": "a process's environment as procfs shows it (its secrets among its variables)",
    # a file-backed keyring's store wherever it lies (its usual folder is one of scvd's own places)
    "keyring_pass.cfg": "a plain-text keyring (keyrings.alt), which holds every secret stored in it",
    "crypted_pass.cfg": "an encrypted keyring file (keyrings.alt), which holds every secret stored in it",
    "cryptfile_pass.cfg": "an encrypted keyring file (keyrings.cryptfile), which holds every secret stored in it",
}
# (directory, file name): names too common to flag anywhere else
SECRET_FILES_IN = {
    (".docker", "config.json"): "a Docker config that may hold registry credentials",
    ("gh", "hosts.yml"): "a GitHub CLI config that holds its token where no keyring is",
    # a relay's experimental_bearer_token (seed 000); `codex` is scvd's private home for it
    (".codex", "config.toml"): CODEX_CONFIG,
    ("codex", "config.toml"): CODEX_CONFIG,
}
SECRET_DIRS = (".ssh", ".aws", ".azure", ".gnupg", ".kube")  # everything under these is secret-like
DIR_KIND = "a directory of keys or credentials"
SECRET_WORDS = ("credential", "creds", "secret", "private_key")  # creds: gemini's oauth_creds.json
SSH_KEY = "an SSH key"
SECRET_PREFIXES = {".env.": "a dotenv file", "id_rsa": SSH_KEY, "id_ed25519": SSH_KEY, "id_ecdsa": SSH_KEY,
                   "id_dsa": SSH_KEY}
TFSTATE = "a Terraform state, which holds secrets in plain text"
SECRET_SUFFIXES = {
    ".pem": "a PEM key or certificate",
    ".key": "a key file",
    ".p12": "a PKCS#12 key store",
    ".pfx": "a PKCS#12 key store",
    ".env": "a dotenv file",  # prod.env; like .env.* it counts templates (example.env) too
    ".tfstate": TFSTATE,
    ".tfstate.backup": TFSTATE,
    ".tfvars": "Terraform variables, which often hold secrets",
    ".jks": "a Java key store",
    ".keystore": "a Java key store",
    ".kubeconfig": KUBECONFIG,
    ".ppk": "a PuTTY private key",
}

# whole words of a file's name (split at anything but a-z and 0-9); `passwd` alone is the
# /etc/passwd format, which holds no password (a root file system copied into a project)
NAME_WORDS = ("password", "passwords", "passwd", "token", "api_key", "apikey")
NOT_NAMES = {"passwd"}
# a name with one of these suffixes is code or prose about a word (token.rs, a lexer's; password_reset.py)
CODE_SUFFIXES = (".py", ".pyi", ".rs", ".go", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".java", ".kt",
                 ".scala", ".c", ".h", ".cc", ".cpp", ".hpp", ".cs", ".rb", ".php", ".swift", ".ex", ".exs",
                 ".erb", ".vue", ".svelte", ".html", ".css", ".scss", ".md", ".rst", ".po", ".snap")
SERVICE_ACCOUNT = ("service-account", "service_account", "serviceaccount")  # a cloud's JSON key file
_NOT_WORD = re.compile(r"[^a-z0-9]+")


def secret_reason(path: str | Iterable[str], workspace: str | None = None, *, folder: bool = False) -> str | None:
    """Why `path` looks secret-like, as a short phrase for the approver, or None. With `workspace`
    (its real path), a credentials folder it is or lies in counts: `config` in `~/.kube` does.
    With `folder`, `path` names a folder: its last part is judged as a folder's name, not a file's."""
    parts = path.split("/") if isinstance(path, str) else list(path)
    inside, above = _workspace_verdict(workspace) if workspace is not None else (None, "")
    last = len(parts) if folder else len(parts) - 1
    for index, part in enumerate(parts):
        # the name words count in a file's name only: a folder `token/` of a parser is none
        cache, name = _file_kinds if index == last else _kinds, part.lower()
        kind = cache.get(name, _UNSEEN)  # no call per component: a read pays this for each
        if kind is _UNSEEN:
            kind = _remember(cache, name)
        if kind is None:
            kind = SECRET_FILES_IN.get((parts[index - 1].lower() if index else above, name))
        if kind is None:
            continue
        if index < len(parts) - 1:
            return f"it is inside {part!r}, {kind}"
        return f"{part!r} is {kind}"
    return inside


def is_secret_like(path: str | Iterable[str]) -> bool:
    return secret_reason(path) is not None


@functools.lru_cache(maxsize=256)  # judged once per workspace, not per call
def _workspace_verdict(workspace: str) -> tuple[str | None, str]:
    """Why every file in `workspace` is secret-like (it is `~/.kube` or inside one), or None; and its
    own lower-cased name, the directory of a file at its top (`config.json` in `~/.docker`). Only the
    credentials folders count there: a word (`secret`) in a project's name would make all its reads ask."""
    parts = [part for part in workspace.split("/") if part]
    inside = next((f"it is inside {part!r}, {DIR_KIND}" for part in parts if part.lower() in SECRET_DIRS), None)
    return inside, parts[-1].lower() if parts else ""


# component -> its kind, remembered: a read looks up the same few names again. A folder's, a file's
_kinds: dict[str, str | None] = {}
_file_kinds: dict[str, str | None] = {}
_KINDS_MAX = 4096
_UNSEEN = ""  # no kind is empty


def _remember(cache: dict[str, str | None], name: str) -> str | None:
    """What a single lower-cased path component looks like, if secret-like: as a folder (`_kinds`)
    or as the file's name (`_file_kinds`)."""
    if len(cache) >= _KINDS_MAX:
        cache.clear()
    kind = cache[name] = _kind_of(name) if cache is _kinds else _kind_of(name) or _file_kind_of(name)
    return kind


def _file_kind_of(name: str) -> str | None:
    """What a file's name says by its words (`password.txt`, `gh_token`, `my-api-key`)."""
    if name in NOT_NAMES or name.endswith(CODE_SUFFIXES):
        return None
    if name.endswith(".json") and any(word in name for word in SERVICE_ACCOUNT):
        return "a cloud service account's key file"
    words = f"_{_NOT_WORD.sub('_', name)}_"
    for word in NAME_WORDS:
        if f"_{word}_" in words:
            return f"named like a secret (the word {word!r})"
    return None


def _kind_of(name: str) -> str | None:
    if name in SECRET_NAMES:
        return SECRET_NAMES[name]
    if name in SECRET_DIRS:
        return DIR_KIND
    for word in SECRET_WORDS:
        if word in name:
            return f"named like a secret (contains {word!r})"
    for prefix, kind in SECRET_PREFIXES.items():
        if name.startswith(prefix):
            return kind
    for suffix, kind in SECRET_SUFFIXES.items():
        if name.endswith(suffix):
            return kind
    if name.endswith(".p8") and "key" in name:  # AuthKey_*.p8, rsa_key.p8; a PICO-8 cart (game.p8) is no key
        return "a PKCS#8 private key"
    return None
