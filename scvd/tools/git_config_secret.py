"""Whether a git config file holds a credential: the one secret-like rule of read that looks at content.

Rule: a repository's config (`config` in a `.git` or `*.git` folder at any depth, a submodule's
`.git/modules/NAME/config` too, or at the top of a workspace that is such a folder; or in a folder
of another name that holds a `HEAD` too, as always_ask.py recognises a git dir: a bare `~/.cfg`), a user's
`.gitconfig`, or git's XDG config (`config` in `.config/git`, the workspace's own folders counted:
a session on `~/.config` or `~/.config/git` too; and in `$XDG_CONFIG_HOME/git` where scvd's
environment, which `bash` inherits, puts it (an absolute one: search_paths.py unsets a relative
one), in a folder not named `.config` too), named in any
case as the other path rules are, counts when its first 64 KiB hold a URL with a password
(`https://x-access-token:TOKEN@github.com`), a URL whose user is a token (`https://ghp_...@`, an
`insteadOf` base's too), or a non-empty `extraheader` (actions/checkout persists `AUTHORIZATION:
basic ...` there), `smtppass`, `*token` or `*password` key. (git's credential stores,
`.git-credentials` and `.config/git/credentials`, are secret_paths.py's by name.) Both the
requested path and the resolved one are judged by name, and the content is that of the fd read's
plan() holds, read with pread so the later read still starts where it would (write's plan() opens
the file it replaces: no hash of it is compared unasked). A file it cannot read is judged by its
path alone. Any other file costs a read one name lookup (a `config` outside a git dir an lstat
and two realpaths). Like secret_paths.py, a visibility aid, not a confidentiality boundary.
"""

from __future__ import annotations

import os
import re

from ..gitmeta import looks_like_git_dir
from ..secret_like import URL_PASSWORD_RE, holds_token
from . import containment
from .containment import show

NAMES = frozenset(("config", ".gitconfig"))  # lower case: what read's plan() compares a file's name with
XDG_FOLDERS = (".config", "git")  # above git's XDG config, ~/.config/git/config ($XDG_CONFIG_HOME/git/config)
SCAN_BYTES = 64 << 10
# GitHub's (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_) and GitLab's token prefixes
TOKEN_PREFIXES = ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "gloas-", "glptt-")
# a user of only letters and digits, this long, with both: a classic 40-hex token, Azure's 52-character PAT
# (an organisation's name with a hyphen, `fabrikam2024-engineering-emea`, is none however long)
_TOKEN_USER_RE = re.compile(r"[A-Za-z0-9]{32,}")
# a URL's user with no password (scheme://USER@host), to be looked at as a token
_URL_USER_RE = re.compile(r"://([^/?#@:\s]+)@")  # from the `://` on, as URL_PASSWORD_RE: linear
# a key that holds a secret by its name, with a value: git writes `key = value` one to a line; an
# empty `extraheader =` resets the list (actions/checkout's cleanup) and holds nothing
_KEY_RE = re.compile(r"^[ \t]*(extraheader|smtppass|[a-z0-9-]*token|[a-z0-9-]*password)[ \t]*=[ \t]*\"?[ \t]*[^\s\"#;]",
                     re.IGNORECASE | re.MULTILINE)


def reason(fd: int, parts: tuple[str, ...], real: tuple[str, ...], workspace: str) -> str | None:
    """Why the file open at `fd` (asked as `parts`, really `real`) is a git config that holds a
    credential, for the approver, or None. Call it only when either path's name is in NAMES."""
    asked, resolved = is_git_config(parts, workspace), real is not parts and is_git_config(real, workspace)
    if not (asked or resolved):
        return None
    try:
        data = os.pread(fd, SCAN_BYTES, 0)
    except OSError:
        return None  # judged as its path is
    found = credential_in(data.decode("latin-1"))  # every byte is one character: the rules look at ASCII
    if found is None:
        return None
    kind = f"{(parts if asked else real)[-1]!r} is a git config that holds a credential ({found})"
    return kind if asked else f"it resolves to {show(containment.join(real))}: {kind}"


def _token_user(user: str) -> bool:
    """Whether a URL's user (`https://USER@host`) is a token: a forge's token prefix, or 32 or more
    letters and digits alone (a user or an organisation's name is shorter, or has a hyphen: Azure
    DevOps puts the organisation there, `https://fabrikam2024@dev.azure.com/...`)."""
    return user.lower().startswith(TOKEN_PREFIXES) or (_TOKEN_USER_RE.fullmatch(user) is not None and holds_token(user))


def is_git_config(parts: tuple[str, ...], workspace: str) -> bool:
    """Whether `parts` names a file git reads as a config: `.gitconfig`, or `config` in a git dir
    (named `.git`/`*.git`, or any folder with a HEAD beside it: a few lstats), in `.config/git` or in
    git's XDG folder where scvd's environment puts it (`xdg_git_dirs`)."""
    name = parts[-1].lower()
    if name == ".gitconfig":
        return True
    if name != "config":
        return False
    folders = (os.path.basename(workspace), *parts[:-1])  # `config` at the top of a session on `.git`
    if any(folder.lower().endswith(".git") for folder in folders):
        return True
    # a git dir named otherwise (`git init --bare ~/.cfg`, a dotfiles setup), by content as always_ask judges it
    if looks_like_git_dir(os.path.join(workspace, *parts[:-1])):
        return True
    # the two folders above it, the workspace's own among them (a session on ~/.config or ~/.config/git)
    above = (os.path.basename(os.path.dirname(workspace)), *folders)[-2:]
    if tuple(folder.lower() for folder in above) == XDG_FOLDERS:
        return True
    return os.path.join(workspace, *parts[:-1]).lower() in xdg_git_dirs(workspace)


def xdg_git_dirs(workspace: str) -> tuple[str, ...]:
    """The real folders (in lower case) whose `config` git reads as its XDG config when run as `bash`
    runs, in scvd's environment (which it inherits; read at each call, as bash's is) from the
    workspace (a relative HOME is taken from git's working directory): $XDG_CONFIG_HOME/git
    (git-config(1): ~/.config/git when unset or empty; a relative one never reaches git, as
    search_paths.py unsets it), and ~/.config/git, where git looks that runs without it (a script
    tool keeps HOME alone). A folder not named `.config`, a linked ~/.config."""
    home = os.environ.get("HOME") or os.path.expanduser("~")
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    bases = (xdg if xdg.startswith("/") else "", os.path.join(home, ".config"))
    return tuple(os.path.realpath(os.path.join(workspace, base, "git")).lower() for base in bases if base)


def credential_in(text: str) -> str | None:
    """What credential a git config's `text` holds, as a phrase that shows none of it, or None."""
    if URL_PASSWORD_RE.search(text):
        return "a URL with a password"
    if any(_token_user(user) for user in _URL_USER_RE.findall(text)):
        return "a URL whose user is a token"
    key = _KEY_RE.search(text)
    if key:
        return f"a value for {key.group(1)!r}"
    return None
