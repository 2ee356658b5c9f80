"""The secret store: named credentials for script tools, looked up in a fixed order.

Lookup order: `secrets.toml` (0600) in the config dir; then the OS keyring
through `keyring` (service `scv`, account = the key name) when a usable backend
exists; then the daemon's environment variable of that name. Writes go to the
keyring when it is usable (dropping the file's copy), else to the file, so a key
is in one of the two; a value in both is one written where the keyring was out of
reach after it held the old one: the file's, the newer, which is why the file
comes first (seed 003 lists the keyring first: the same answer but for that case). A keyring that fails (locked) is
passed over; a key then found nowhere else is `Unavailable` ("unlock it"), never
"not set": storing it again would fail on the same lock.

Rule: a value never leaves this module except as the return of `get`/`require`;
nothing here logs, formats or raises with a value in it.

A keyring backend is judged by its priority, never by calling it and waiting
(a headless box usually has none): one chosen explicitly (PYTHON_KEYRING_BACKEND
or keyringrc.cfg) is used when its priority is above 0; an auto-detected one only
when keyring calls it recommended (priority >= 1). The keyring cannot list its
entries, so the file keeps the names (not the values) stored there.

Every method blocks (file I/O, D-Bus): the daemon calls them through `off_loop`, or
uses `get_async` / `require_async`, which do. `off_loop` runs them on threads of
their own, never the loop's default executor that session opens and skill reads use.
A keyring call is waited for at most KEYRING_SECONDS, on a thread of its own: one
that hangs (a keyring waiting to be unlocked) is `Unavailable`, and while it hangs
the next calls are refused at once, so a hung keyring holds no `off_loop` thread and
no lock of the file, and later secrets (those in the file, the environment) go on.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import logging
import os
import re
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, TypeVar

if TYPE_CHECKING:
    import asyncio

from . import errors
from .durable import sync_directory
from .keyring_files import check_backend
from .paths import make_dirs
from .redact import hide_in_logs
from .secrets_file import KEY_RE, edit_file, key_problem, parse_file, render_file

log = logging.getLogger("scvd.secrets")

SERVICE = "scv"
FILE_MODE = 0o600
MAX_VALUE_CHARS = 65536
KEYRING_SECONDS = 25.0  # a D-Bus call's default reply timeout: a keyring silent that long is stuck

SOURCES = ("keyring", "file", "env")
# what a tool or server says when it refused a credential (seed 003: a 401, a 403, an expired token): looked
# for only in the failure of a script tool or an MCP server that is given secrets. A bare `key` or `token`
# is not enough ("SyntaxError: invalid token", "cache key expired"): a re-entered key would not help
# there, and the person would be asked for one all the same
# the cloud APIs' own words too: Anthropic's `invalid x-api-key` and `authentication_error`, Slack's
# `not_authed` and `token_revoked`, AWS's `ExpiredToken` and "The security token included in the
# request is invalid", none of which said so before (a script's `aws` or `curl` exits 254 or 1)
_CREDENTIAL = (r"(?:(?:x-)?api[ _-]?key|(?:api|access|auth|bearer|oauth|refresh|security)[ _-]?token"
               r"|credentials?|password)")
_REFUSED = (
    r"unauthori[sz]ed|bad credentials|invalid_auth|\b403\W{1,3}forbidden|(?:status|http|error|code)\W{1,3}40[13]\b"
    rf"|(?:invalid|incorrect|wrong|revoked|expired) {_CREDENTIAL}|{_CREDENTIAL} (?:provided |included in the "
    r"request )?(?:is |was |has |have |has been )?(?:invalid|incorrect|expired|revoked)"
    r"|\btoken[ _](?:has |is )?(?:expired|revoked)|\bexpiredtoken|invalidclienttokenid"
    # `_auth_error` inside a name (a traceback's `handle_auth_error`) is no refusal: not after `_`, and whole
    r"|(?<!_)auth(?:entication)?[ _](?:failed|required|error)\b|not[ _]authenticated|\bnot_authed\b"
    # an error code that ends in a failure (`user_authentication_failed`) is one; a function's name does not
    # end so (`handle_auth_error`), and one that does is no code where a traceback's frame or a call shows it
    # nor where Python's message quotes a name (NameError's `name 'on_auth_failed'`, AttributeError's)
    r"|(?<![\w.])(?<!\bin )(?<!name ')(?<!attribute ')(?:[a-z0-9]+_)+auth(?:entication)?_failed\b(?!\()"
)
# the source line a Python traceback quotes under a frame, indented past its `File "...", line N`
# (none under a frame without source, where the next line may be the error itself)
# at a line's start: unanchored, a run of N spaces cost N^2 steps (64 KiB of them froze scvd for minutes)
_QUOTED_SOURCE = r'(?m)^( *)(File "[^"\n]*", line \d+[^\n]*)\n\1 +\S[^\n]*'
JUDGED_CHARS = 64 << 10  # of a long failure, its head and tail: _REFUSED reads about 2.5 MB/s, on the loop


@functools.cache
def _refused_patterns() -> tuple[re.Pattern[str], re.Pattern[str]]:
    # compiled at the first failure that carries secrets: ~5 ms that every start paid before READY=1
    return re.compile(_REFUSED, re.IGNORECASE), re.compile(_QUOTED_SOURCE)


def reads_refused(said: str) -> bool:
    """Whether a failure's text reads like a refused credential (_REFUSED), the code a traceback
    quotes left out: `callback = on_auth_failed` in a frame is no refusal. Of a long text, its first
    and last JUDGED_CHARS / 2 characters."""
    refused, quoted_source = _refused_patterns()
    if len(said) > JUDGED_CHARS:  # a server's 64 MiB error: where a refusal is said, near either end
        said = f"{said[:JUDGED_CHARS // 2]}\n{said[-JUDGED_CHARS // 2:]}"
    return refused.search(quoted_source.sub(r"\1\2", said)) is not None


@dataclass(frozen=True)
class Entry:
    """One known secret name and where its value is found."""

    name: str
    # keyring | file | env | missing | unknown (a keyring that cannot be read may hold it) | unusable (a NUL in it)
    source: str
    where: str  # the keyring backend, the file's path, or "environment"


def check_key(key: str) -> str:
    problem = key_problem(key)
    if problem:
        raise errors.InvalidRequest(problem)
    return key


def stored_form(value: str) -> str:
    """A value of one line without the whitespace around it (a token pasted with a space or a line
    break got a 401 that a new round of the same paste could not fix); one of several lines (a PEM or
    OpenSSH key, whose last line break OpenSSH requires) as it is. The rule for a value stored and
    for one found (`_used`): set by hand in secrets.toml or the environment, it is read the same."""
    stripped = value.strip()
    return value if "\n" in stripped else stripped


def _used(value: str | None) -> str:
    """A value found in a store as tools get it (`stored_form`); "" for none, or only whitespace."""
    return stored_form(value) if value else ""


def check_value(value: str) -> str:
    """The value to store (`stored_form`), or InvalidRequest."""
    value = stored_form(value)
    if not value.strip():
        raise errors.InvalidRequest("a secret's value cannot be empty (or only whitespace)")
    if len(value) > MAX_VALUE_CHARS:
        raise errors.InvalidRequest(f"a secret's value is limited to {MAX_VALUE_CHARS} characters, this one has "
                                    f"{len(value):,}; nothing was stored (is it the right file?)")
    if "\x00" in value:
        raise errors.InvalidRequest("a secret's value cannot hold a NUL character (binary data?): store it as text, "
                                    "e.g. its base64; nothing was stored")
    return value


def unusable_error(key: str, where: str) -> errors.CredentialMissing:
    """`key`'s value (found in `where`) holds a NUL, which no environment or argv can carry: every use
    crashed (`ValueError: embedded null byte`). check_value() refuses one stored; this is one written
    into secrets.toml by hand (`\\u0000`) or into the keyring by another program."""
    return errors.CredentialMissing(
        f"the secret {key} in {where} holds a NUL character, which no program's environment can carry: store "
        f"it again as text (e.g. its base64) with `scvctl secrets set {key}`, or let the agent call store_secret "
        f"with key {key!r}", hint=f"scvctl secrets set {key}", keys=(key,))


def missing_message(key: str) -> str:
    """What a user or an agent reads when `key` is nowhere: how to store it (no value, ever)."""
    return (f"the secret {key} is not set: store it with `scvctl secrets set {key}`, or let the agent "
            f"call store_secret with key {key!r} so a person enters it in `scvctl approvals watch`")


# --- threads of their own ------------------------------------------------------------

THREADS = 8  # lookups of different keys, stores, launches at once; a silent keyring, one for KEYRING_SECONDS
_T = TypeVar("_T")
_pool: ThreadPoolExecutor | None = None


def off_loop(fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
    """`fn(*args)` on the secret store's threads, for a caller on the event loop: whatever may ask
    the keyring (a lookup, a store, an MCP server's launch, a chat provider's key)."""
    import asyncio

    global _pool
    if _pool is None:  # made at first use: an idle daemon without secrets starts no thread
        _pool = ThreadPoolExecutor(max_workers=THREADS, thread_name_prefix="scvd-secrets")
    return asyncio.get_running_loop().run_in_executor(_pool, fn, *args)


def stop_threads() -> None:
    """At exit: the idle threads end (the loop's own executor does so as it closes); one still waiting
    on a silent keyring stays, and the exit says so."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
        _pool = None


# --- keyring detection ------------------------------------------------------------


def detect_keyring() -> tuple[Any | None, str]:
    """The usable keyring backend and a line saying why, or (None, why not). Never calls it."""
    try:
        from keyring import backend, core
    except ImportError:
        return None, "the keyring package is not installed"
    try:
        chosen = core.load_env() or core.load_config()
    except Exception as exc:  # a named backend that fails to import or is not viable here
        return None, f"the configured keyring backend is not usable ({exc})"
    if chosen is not None:
        if _priority(chosen) > 0:
            return chosen, f"keyring {_name(chosen)} (chosen in the keyring configuration)"
        return None, f"the configured keyring backend {_name(chosen)} stores nothing"
    from keyring.backends import chainer

    found = [kr for kr in backend.get_all_keyring() if not isinstance(kr, chainer.ChainerBackend)]
    best = max(found, key=_priority, default=None)
    if best is None or _priority(best) < 1:
        return None, "no recommended keyring backend (no Secret Service or KWallet here)"
    return best, f"keyring {_name(best)}"


def _priority(kr: Any) -> float:
    try:
        return float(kr.priority)
    except Exception:  # a backend says "not here" by raising from its priority
        return -1.0


def _name(kr: Any) -> str:
    cls = type(kr)
    return f"{cls.__module__}.{cls.__qualname__}"


# --- the secrets file ---------------------------------------------------------------


class SecretStore:
    """`secrets.toml`, then the keyring, then the environment; see the module docstring."""

    def __init__(self, path: Path, env: Mapping[str, str] | None = None,
                 *, use_keyring: bool = True, env_label: str = "environment") -> None:
        self.path = path
        self.env = os.environ if env is None else env
        self.env_label = env_label
        self._use_keyring = use_keyring
        self._keyring: tuple[Any | None, str] | None = None
        self._looking: dict[str, Any] = {}  # key -> the asyncio future of its lookup under way (get_async)
        self._silent: dict[threading.Thread, str] = {}  # keyring calls past KEYRING_SECONDS -> "verb key"
        self._silence = threading.Lock()

    # keyring

    def keyring(self) -> Any | None:
        """The usable backend, detected once."""
        return self._detect()[0]

    def keyring_status(self) -> str:
        """One line on the keyring: which backend, or why none is used."""
        return self._detect()[1]

    def _detect(self) -> tuple[Any | None, str]:
        if self._keyring is None:
            self._keyring = detect_keyring() if self._use_keyring else (None, "keyring turned off")
            log.info("secret store: %s; file %s", self._keyring[1], self.path)
            if self._keyring[0] is not None:  # one that keeps a file where scvd's rules do not look
                check_backend(self._keyring[0], os.environ)
        return self._keyring

    def _keyring_get(self, key: str) -> str | None:
        """The keyring's value for `key` (None with no keyring); Unavailable when it cannot be
        read (e.g. locked)."""
        kr = self.keyring()
        if kr is None:
            return None
        return self._ask(kr, "read", key, kr.get_password, SERVICE, key)

    def _ask(self, kr: Any, verb: str, key: str, call: Callable[..., _T], *args: Any) -> _T:
        """`call(*args)` on a thread of its own (a daemon thread: scvctl exits with one hung), waited
        for at most KEYRING_SECONDS; Unavailable when the keyring refuses or stays silent, and at once
        while an earlier call still hangs: a hung keyring holds a few threads, not one per use."""
        with self._silence:
            if any(t.is_alive() for t in self._silent):
                raise self._refused(kr, verb, key, f"an earlier call has had no answer for over {KEYRING_SECONDS:g} s")
            self._silent.clear()
        answer: dict[str, Any] = {}

        def run() -> None:
            try:
                answer["value"] = call(*args)
            except Exception as exc:  # only its type is ever named: its message may quote a value
                answer["error"] = type(exc).__name__

        thread = threading.Thread(target=run, name="scvd-keyring", daemon=True)
        thread.start()
        thread.join(KEYRING_SECONDS)
        if thread.is_alive():
            with self._silence:
                self._silent[thread] = f"{verb} {key}"
            raise self._refused(kr, verb, key, f"no answer within {KEYRING_SECONDS:g} s")
        if "error" in answer:
            raise self._refused(kr, verb, key, answer["error"])
        return answer["value"]

    def _refused(self, kr: Any, verb: str, key: str, why: str) -> errors.KeyringRefused:
        """The keyring failed (locked, usually) or did not answer: which one, and the two ways on.
        `why` is an exception's type, never its message: a backend's might quote what it was given."""
        what = f"the keyring {_name(kr)} could not {verb} {key} ({why})"
        return errors.KeyringRefused(
            f"{what}: unlock it (e.g. log in to the desktop session, or open your keyring app) and try "
            f"again, or set PYTHON_KEYRING_BACKEND=keyring.backends.null.Keyring to keep secrets in {self.path}",
            what=what, hint=f"unlock the keyring {_name(kr)}, then try again")

    # lookups

    def lookup(self, key: str) -> tuple[str, str] | None:
        """(value, source) for `key`, or None; a value read is hidden in scvd's log lines from now on."""
        found = self._find(key)
        if found is not None:
            hide_in_logs({key: found[0]})
        return found

    def _find(self, key: str) -> tuple[str, str] | None:
        """lookup() without the logs. A keyring that cannot be read (locked) is passed
        over for the file and the environment; if neither has `key`, its Unavailable is raised:
        the value may well be in the keyring, so "not set" (and storing it again) would mislead."""
        check_key(key)
        try:
            values, _ = self._read()
        except errors.ConfigError as exc:  # a broken file must not hide what the keyring holds
            broken, values = exc, {}
        else:
            broken = None
        value = _used(values.get(key))
        if value:  # the newer: set() into the keyring drops the file's copy, set() without one
            return self._usable(key, value, "file")  # (scvctl over ssh) writes the file while the keyring keeps the old
        refused = None
        try:
            value = _used(self._keyring_get(key))
        except errors.KeyringRefused as exc:
            refused, value = exc, ""
        if value:
            return self._usable(key, value, "keyring")
        if broken is not None:
            raise broken
        value = _used(self.env.get(key))
        if value:
            if refused is not None:  # logged only here: the raise below says it to whoever asked
                log.warning("%s; using the environment's value", refused.what)
            return value, "env"
        if refused is not None:
            raise refused
        return None

    def _usable(self, key: str, value: str, source: str) -> tuple[str, str]:
        """(value, source), or CredentialMissing for a value no process can be given (unusable_error):
        not passed over for the next source, which would hide it."""
        if "\x00" in value:
            raise unusable_error(key, str(self.path) if source == "file" else self.keyring_status())
        return value, source

    def get(self, key: str) -> str | None:
        found = self.lookup(key)
        return found[0] if found else None

    def require(self, key: str) -> str:
        """The value, or CredentialMissing naming the key and how to store it (Unavailable
        when only a locked keyring could hold it)."""
        value = self.get(key)
        if value is None:
            raise self.missing_error(key)
        return value

    def missing_error(self, key: str, usual: str = "") -> errors.CredentialMissing:
        """CredentialMissing for `key`, which has no value: `missing` and `missing_hint` (`usual`
        defaults to `scvctl secrets set KEY  (or call store_secret)`). Reads the file: blocks."""
        usual = usual or f"scvctl secrets set {key}  (or call store_secret)"
        return errors.CredentialMissing(self.missing(key), hint=self.missing_hint(key, usual))

    def out_of_reach(self, key: str) -> bool:
        """Whether `key` went into a keyring this process cannot use: the file's [keyring] index
        lists it (`scvctl secrets set` in a desktop session), but no keyring is usable here."""
        return self.keyring() is None and key in self._read()[1]

    def missing(self, key: str) -> str:
        """Why `key` has no value and how to give it one (storing it into an unreachable keyring
        again would not help)."""
        if not self.out_of_reach(key):
            return missing_message(key)
        return (f"the secret {key} was stored in an OS keyring ({self.path} lists it), which this process "
                f"cannot use ({self.keyring_status()}): give scvd that keyring (the desktop session's D-Bus, "
                "or the same PYTHON_KEYRING_BACKEND), or store it in the file with "
                f"`PYTHON_KEYRING_BACKEND=keyring.backends.null.Keyring scvctl secrets set {key}`, or let the "
                f"agent call store_secret with key {key!r} (scvd stores it in the file)")

    def missing_hint(self, key: str, usual: str) -> str:
        """`usual`, unless `key` sits in a keyring this process cannot use (see `missing`)."""
        if not self.out_of_reach(key):
            return usual
        return f"PYTHON_KEYRING_BACKEND=keyring.backends.null.Keyring scvctl secrets set {key}"

    async def get_async(self, key: str) -> str | None:
        """`get` on the store's threads (`off_loop`), for callers on the event loop (the keyring may talk D-Bus). One
        lookup per key at a time: callers that come while it is under way share its answer, so a
        keyring that hangs (waiting to be unlocked) holds one thread, not one per call that gave up."""
        import asyncio

        loop = asyncio.get_running_loop()
        looking = self._looking.get(key)
        if looking is None or looking.get_loop() is not loop:
            looking = self._looking[key] = off_loop(self.get, key)
            looking.add_done_callback(lambda done: self._settled(key, done))
        return await asyncio.shield(looking)  # a caller's timeout must not end the others' wait

    def _settled(self, key: str, done: Any) -> None:
        if self._looking.get(key) is done:
            del self._looking[key]
        if not done.cancelled():
            done.exception()  # every caller may have given up: retrieved, so never logged as lost

    async def require_async(self, key: str) -> str:
        """`get_async`, or CredentialMissing as `require` says it."""
        value = await self.get_async(key)
        if value is None:
            raise await off_loop(self.missing_error, key)
        return value

    def source(self, key: str) -> Entry:
        found = self.lookup(key)
        return self._entry(key, found[1] if found else "missing")

    def list(self, also: list[str] | tuple[str, ...] = ()) -> list[Entry]:
        """Every stored name, plus `also` (e.g. keys that tools declare), with its source: `unknown`
        for one that only a keyring that cannot be read (locked) may hold; the others are still said."""
        values, names = self._read()
        keys = sorted(set(values) | set(names) | {k for k in also if KEY_RE.fullmatch(k)})
        entries = []
        for key in keys:
            try:
                entries.append(self.source(key))
            except errors.KeyringRefused as exc:
                entries.append(Entry(name=key, source="unknown", where=f"in neither the file nor the "
                                     f"environment; {exc.what}: unlock it to see whether it is set"))
            except errors.CredentialMissing as exc:  # unusable_error: set, but no tool can be given it
                entries.append(Entry(name=key, source="unusable", where=exc.message))
        return entries

    def _entry(self, key: str, source: str) -> Entry:
        missing = "not set"
        if source == "missing" and self.out_of_reach(key):
            missing = f"not set here: stored in a keyring this process cannot use ({self.keyring_status()})"
        where = {"keyring": self.keyring_status(), "file": str(self.path), "env": self.env_label,
                 "missing": missing}[source]
        return Entry(name=key, source=source, where=where)

    # changes

    def set(self, key: str, value: str) -> Entry:
        """Store `key`: in the keyring when usable (and drop any copy in the file), else the file.
        The file is written first, the name listed: one that cannot be written stores nothing (never
        a keyring value `list` does not show); a keyring that refuses gets the file back as it was."""
        check_key(key)
        value = check_value(value)
        kr = self.keyring()
        with self._locked():
            before = self._text()
            values, names = parse_file(self.path, before)
            if kr is None:
                self._write_or_unstored(key, {**values, key: value}, names)
                source = "file"
            else:
                self._write_or_unstored(key, {k: v for k, v in values.items() if k != key},
                                        sorted(set(names) | {key}))
                try:
                    self._ask(kr, "store", key, kr.set_password, SERVICE, key, value)
                except errors.Unavailable:
                    with self._silence:  # a store still under way may yet store it: the name stays listed
                        under_way = f"store {key}" in self._silent.values()
                    if not under_way:  # the file back as it was, byte for byte (one without it, where there was none)
                        self._write_text(before or render_file(values, names))
                    raise
                source = "keyring"
        log.info("secret %s stored (%s)", key, source)
        return self._entry(key, source)

    def delete(self, key: str) -> list[str]:
        """Remove `key` from the keyring and the file; return where it was removed from (`names`: only
        its name, listed under [keyring], whose keyring entry was already gone).
        A keyring that cannot be read (locked) refuses the whole delete, so the name stays
        listed as long as the keyring may hold its value."""
        check_key(key)
        removed: list[str] = []
        kr = self.keyring()
        with self._locked():
            values, names = self._read()
            if kr is None and key in names:  # dropping the name would leave its value in effect, unlisted
                raise errors.Unavailable(
                    f"{key} is held in an OS keyring ({self.path} lists it), which this process cannot use "
                    f"({self.keyring_status()}); nothing was deleted: delete it where that keyring is "
                    f"(`scvctl secrets delete {key}` in your desktop session, or with the same "
                    f"PYTHON_KEYRING_BACKEND), or, if that keyring is gone for good, remove {key} from names "
                    f"under [keyring] in {self.path}",
                    hint=f"scvctl secrets delete {key}  (where the keyring is)")
            if self._keyring_get(key) is not None:
                self._ask(kr, "delete", key, kr.delete_password, SERVICE, key)
                removed.append("keyring")
            if key in values:
                del values[key]
                removed.append("file")
            if key in names and not removed:  # its keyring entry went another way (the keyring's app):
                removed.append("names")  # listed `missing` until now, and delete said "not stored"
            if key in names or removed:
                self._write(values, [n for n in names if n != key])
        if removed:
            log.info("secret %s deleted (%s)", key, ", ".join(removed))
        return removed

    # the file

    def _read(self) -> tuple[dict[str, str], list[str]]:
        return parse_file(self.path, self._text())

    def _text(self) -> str:
        """The file's text; "" when there is none."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO: no wait
        except FileNotFoundError:
            return ""
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW: a link (say, into a dotfiles repository)
                raise errors.ConfigError(
                    f"{self.path} is a symbolic link; secrets are read only from a regular file in place "
                    "(0600, never through a link another place decides): move the file there instead of "
                    f"linking it (mv \"$(readlink -f {self.path})\" {self.path})") from None
            raise errors.ConfigError(f"{self.path}: cannot read ({exc.strerror})") from None
        try:
            with os.fdopen(fd, "rb") as f:
                mode = os.fstat(fd).st_mode
                if not stat.S_ISREG(mode):  # a FIFO's read waited for a writer, for good
                    raise errors.ConfigError(f"{self.path} is not a regular file; secrets are read only from one: "
                                             "remove it (`scvctl secrets set KEY` writes a new one)")
                if mode & 0o077:  # someone loosened it: a secrets file stays 0600
                    os.fchmod(fd, FILE_MODE)
                    log.warning("repaired permissions: %s was readable by others; now 0600", self.path)
                data = f.read()
        except OSError as exc:  # e.g. a directory in its place
            raise errors.ConfigError(f"{self.path}: cannot read ({exc.strerror}); fix or remove it") from None
        try:  # -sig: a BOM (an editor's) was `not valid TOML`, and took every secret with it
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:  # "replace" handed a tool a value other than the one typed
            line = data.count(b"\n", 0, exc.start) + 1  # no byte of it named: it may be a value's
            # not `scvctl secrets set`: it reads the file first, so it fails the same way
            raise errors.ConfigError(f"{self.path}: not UTF-8 text at line {line}; save it as UTF-8 in an "
                                     "editor (until then `scvctl secrets` cannot change it either)") from None
        return text

    def _write(self, values: Mapping[str, str], names: list[str]) -> None:
        """Atomically: a 0600 temporary file in the same directory, then rename, then the directory
        synced. Only the lines of what changed are rewritten (`edit_file`). Under `_locked`."""
        self._write_text(edit_file(self.path, self._text(), values, names))

    def sweep(self) -> list[str]:
        """At start: remove the temp files of writers killed mid-write (each holds every secret of its
        time), unless a writer is at work now (its lock held): it sweeps them itself."""
        try:
            with self._locked(wait=False):
                return self._sweep()
        except (errors.ConfigError, OSError):  # no directory to sweep, or a writer holds the lock
            return []

    def _sweep(self) -> list[str]:
        """`.secrets.toml.<pid>.tmp` beside the file, a regular file of ours: what _write_text names
        its temp file. Under `_locked`; a delete or a rotation must not leave a copy of the old value."""
        ours = re.compile(rf"\.{re.escape(self.path.name)}\.[0-9]+\.tmp")
        removed = []
        with os.scandir(self.path.parent) as entries:
            for entry in entries:
                if (ours.fullmatch(entry.name) and entry.is_file(follow_symlinks=False)
                        and entry.stat(follow_symlinks=False).st_uid == os.geteuid()):
                    with suppress(FileNotFoundError):
                        os.unlink(entry.path)
                        removed.append(entry.name)
        if removed:
            log.warning("removed %s beside %s: left by a write of secrets that was killed, each held the "
                        "secrets of its time", ", ".join(sorted(removed)), self.path)
        return removed

    def _write_text(self, text: str) -> None:
        self._sweep()
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        except OSError as exc:
            raise errors.ConfigError(f"{self.path}: cannot write ({exc.strerror} on {tmp})") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                os.fchmod(f.fileno(), FILE_MODE)
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            sync_directory(self.path.parent, str(self.path))
        except OSError as exc:  # a full disk, a directory in the file's place
            tmp.unlink(missing_ok=True)
            raise errors.ConfigError(f"{self.path}: cannot write ({exc.strerror})") from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise

    def _write_or_unstored(self, key: str, values: Mapping[str, str], names: list[str]) -> None:
        try:
            self._write(values, names)
        except errors.ConfigError as exc:
            raise errors.ConfigError(f"{exc.message}; {key} was not stored, nothing changed: fix that and "
                                     "set it again") from None

    @contextmanager
    def _locked(self, wait: bool = True) -> Iterator[None]:
        """One writer at a time (scvctl and the daemon): an flock on the directory (BlockingIOError
        without `wait` when another holds it)."""
        try:
            make_dirs(self.path.parent)
            fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as exc:  # a file in the directory's place, a read-only file system
            raise errors.ConfigError(f"{self.path}: cannot write ({exc.strerror} on {self.path.parent}); nothing "
                                     "was changed: make that a directory you can write, or set SCV_HOME") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
            yield
        finally:
            os.close(fd)
