"""`scvctl secrets`: set, list and delete the secrets script tools use, without the daemon.

It works on the instance's store directly (the OS keyring when usable, else
secrets.toml in the config dir), the same store the daemon reads on every call,
so no reload is needed. Values are read with masked input on a terminal and from
stdin otherwise (like `docker login --password-stdin`); they are never printed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from scvd import errors, paths as paths_mod
from scvd.secrets import SecretStore, check_key, stored_form
from scvd.text import printable

from .cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE
from .commands import emit_json
from .prompts import masked_input


def _plainly(handler: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """`handler`'s errors said without a wire code: no daemon is involved, so `config:` (a broken
    secrets.toml is no config.toml) or `invalid_request:` (a value too long) named the wrong thing."""
    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except errors.UsageError:
            raise
        except errors.ScvError as exc:
            print(f"scvctl: {printable(exc.message)}", file=sys.stderr)
            return EXIT_ERROR
    return run


def store() -> SecretStore:
    return SecretStore(paths_mod.resolve().secrets_file,
                       env_label="this shell's environment (scvd reads its own)")


def read_value(key: str) -> str:
    """Masked on a terminal (a PEM or OpenSSH key pasted there read whole); otherwise all of stdin (the
    store drops the line break `echo` adds, and keeps a key of several lines whole)."""
    if sys.stdin.isatty():
        try:
            return masked_input(f"value for {key} (input hidden): ")
        except EOFError:  # Ctrl-D: no value, said as for an empty one
            print(file=sys.stderr)
            return ""
        except errors.UsageError as exc:  # a key cut short (Ctrl-D before its END line)
            raise errors.UsageError(f"{exc.message}: paste it whole, or give the file on stdin: "
                                    f"scvctl secrets set {key} < key.pem") from None
    try:
        value = sys.stdin.buffer.read().decode("utf-8")
    except UnicodeDecodeError as exc:  # never echo the bytes: they are the secret
        raise errors.UsageError(f"the value piped in for {key} is not UTF-8 text; "
                                "a secret is stored as text") from None
    return value


def _bad_key(key: str) -> bool:
    """Whether `key` is no key name, said as a usage error (exit 2), for set and delete alike."""
    try:
        check_key(key)
    except errors.InvalidRequest as exc:
        print(f"usage: {exc.message}", file=sys.stderr)
        return True
    return False


@_plainly
def cmd_set(args: argparse.Namespace) -> int:
    if _bad_key(args.key):
        return EXIT_USAGE
    value = read_value(args.key)
    if not value.strip():
        print(f"usage: no value given for {args.key}: type it at the prompt, or pipe it in "
              f"(printf %s \"$TOKEN\" | scvctl secrets set {args.key})", file=sys.stderr)
        return EXIT_USAGE
    entry = store().set(args.key, value)  # a one-line value without the whitespace around it
    echoed = value[:-2] if value.endswith("\r\n") else value[:-1] if value.endswith("\n") else value
    trimmed = stored_form(value) not in (value, echoed)  # the line break `echo` adds is not news
    if args.json:
        emit_json({"name": entry.name, "source": entry.source, "where": entry.where, "trimmed": trimmed})
    else:
        dropped = "; the spaces or line breaks around the value were dropped" if trimmed else ""
        print(f"stored {entry.name} in the {entry.source} ({entry.where}){dropped}")
    return EXIT_OK


@_plainly
def cmd_list(args: argparse.Namespace) -> int:
    from scvd.tools.script_defs import declared_secrets

    paths = paths_mod.resolve()
    named = set(declared_secrets(paths)) | _configured_secrets(paths)  # a named key may be missing
    entries = store().list(also=sorted(named))
    if args.json:
        emit_json([{"name": e.name, "source": e.source, "where": e.where} for e in entries])
    elif not entries:
        print("no secrets stored, and none named by a script tool or config.toml; add one with "
              "`scvctl secrets set KEY`")
    else:
        width = max(len(e.name) for e in entries)
        for e in entries:
            print(f"{e.name:<{width}}  {e.source:<7}  {e.where}")
    unknown = [e.name for e in entries if e.source == "unknown"]
    if unknown:  # the list is printed but not whole: a script checking for its key must not read "set"
        print(f"scvctl: the keyring could not be read (locked?): unlock it, then list again to see whether "
              f"it holds {', '.join(unknown)}", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def _configured_secrets(paths: paths_mod.Paths) -> set[str]:
    """Keys config.toml names ({secret = KEY}, api_key_secret); a config that does not load names none."""
    from scvd import config as config_mod

    try:
        return config_mod.secret_refs(config_mod.load(paths.config_file).config)
    except errors.ConfigError as exc:
        print(f"scvctl: config.toml's secret names are not listed: {exc.message}", file=sys.stderr)
        return set()


@_plainly
def cmd_delete(args: argparse.Namespace) -> int:
    if _bad_key(args.key):
        return EXIT_USAGE
    s = store()
    removed = s.delete(args.key)
    if removed:
        if args.json:
            emit_json({"name": args.key, "deleted_from": removed})
        elif removed == ["names"]:
            print(f"deleted {args.key} from the names {s.path} lists (the keyring no longer held its value)")
        else:
            print(f"deleted {args.key} from the {' and the '.join(removed)}")
        return EXIT_OK
    if s.source(args.key).source == "env":  # said by _plainly, after `scvctl:` as its other errors
        raise errors.Failed(f"{args.key} is not stored; it comes from the environment, which scvctl cannot change")
    raise errors.Failed(f"{args.key} is not stored; `scvctl secrets list` shows the names that are")
