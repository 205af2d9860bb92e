"""The on-disk cache: where cpuify keeps what it built (compiled kernel modules, programs
built by `cpuify run`, the runtime libraries) and how an entry is written, verified, used
and evicted.  Every other module asks this one for cache paths (`cache_dir`).

- Location: `$CPUIFY_CACHE_DIR`, else `$XDG_CACHE_HOME/cpuify`, else `~/.cache/cpuify`.
- Trust: the directory is created 0700; an existing one owned by another user or writable
  by group/others is refused (one warning, then no cache).  Files are 0600, executables
  0700, whatever the umask.
- Entries: a header line with the SHA-256 of the rest, then JSON metadata, then binary
  data.  A file that must stay a plain file (an executable, an archive, a shared library)
  is stored under a name holding its SHA-256, next to a small entry naming it; its hash
  is checked before the path is handed out.  A damaged entry is removed and rebuilt with
  one warning.  No entry is ever unpickled or executed before it is verified.
- Writes go to a temporary file in the same directory, fsync'd and renamed into place:
  concurrent processes building the same thing both succeed, one rename wins.
- Size: `$CPUIFY_CACHE_MAX_BYTES` (default 2 GiB, suffixes K/M/G); each use touches an
  entry's mtime, each store evicts the least recently used entries past the limit; the
  toolkit directories of `cpuify cuda-home` count too, evicted whole (never the one used
  last, nor one this process uses).
- No cache (`CPUIFY_NO_CACHE=1`, or a directory that cannot be used): `cache_dir()` hands
  out a private temporary directory of this process instead, removed at exit, on an
  exception that ends the process and on SIGTERM (`temporary_directory`, `on_sigterm`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from cpuify.errors import CacheWarning

DEFAULT_MAX_BYTES = 2 << 30
_MAGIC = b"CPUIFY-CACHE/1"
_TMP_PREFIX = ".tmp-"
_STALE_TMP_SECONDS = 3600.0     # a temporary file this old was left by a killed process
_IN_USE_SECONDS = 10.0          # an entry used this recently may be about to be linked or run

_lock = threading.RLock()
_checked: dict[str, str | None] = {}    # cache directory -> why it cannot be used (None: usable)
_warned: set[str] = set()
_private: Path | None = None            # this process's directory when there is no cache
_cleanup: list[Path] = []               # temporary directories to remove at exit / SIGTERM
_cleanup_pid = os.getpid()


def _warn(message: str) -> None:
    """Each distinct message once per process."""
    with _lock:
        if message in _warned:
            return
        _warned.add(message)
    # attributed to the caller of cpuify (the user's line), not to cpuify's internals
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    level, frame = 2, sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(package):
        level += 1
        frame = frame.f_back
    warnings.warn(CacheWarning(message), stacklevel=level)


# ------------------------------------------------------------------------------------
# where


def location() -> Path:
    """The configured cache directory (whether or not it can be used)."""
    env = os.environ.get("CPUIFY_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "cpuify"


def disabled_by_user() -> bool:
    return os.environ.get("CPUIFY_NO_CACHE", "") not in ("", "0")


def max_bytes() -> int:
    """The size limit: `$CPUIFY_CACHE_MAX_BYTES` (bytes, or with a K/M/G suffix)."""
    text = os.environ.get("CPUIFY_CACHE_MAX_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", text.upper())
    value = -1
    if m:
        value = int(float(m.group(1)) * (1 << (10 * " KMGT".index(m.group(2) or " "))))
    if value < 0:
        _warn(f"CPUIFY_CACHE_MAX_BYTES={text!r} is not a size (e.g. 500M, 2G); "
              f"using the default {DEFAULT_MAX_BYTES >> 30} GiB")
        return DEFAULT_MAX_BYTES
    return value


def _untrusted(path: Path) -> str | None:
    """Why an existing directory must not be used as a cache (None: it may)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        return (f"is owned by another user (uid {st.st_uid}); set CPUIFY_CACHE_DIR to a "
                "directory of your own")
    if st.st_mode & 0o022:
        who = {0o022: "group and others", 0o020: "its group", 0o002: "others"}[st.st_mode & 0o022]
        return (f"is writable by {who} (mode {stat.S_IMODE(st.st_mode):04o}), so they "
                "could plant code that cpuify runs; "
                f"check its contents and run `chmod 700 {path}`, or `cpuify cache clear`, "
                "or set CPUIFY_CACHE_DIR")
    if not os.access(path, os.W_OK | os.X_OK):
        return ("is not writable; make it writable, set CPUIFY_CACHE_DIR to another "
                "directory, or CPUIFY_NO_CACHE=1")
    return None


def _make_private_dirs(path: Path) -> None:
    """mkdir -p with mode 0700 for each directory created, whatever the umask."""
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue
        os.chmod(d, 0o700)


def _check(path: Path) -> str | None:
    """Creates the cache directory if needed; why it cannot be used (None: it can)."""
    key = str(path)
    with _lock:
        if key in _checked and (_checked[key] is not None or path.is_dir()):
            return _checked[key]
        why: str | None
        try:
            _make_private_dirs(path)
            why = _untrusted(path)
            if why is None and stat.S_IMODE(os.stat(path).st_mode) & 0o077:
                os.chmod(path, 0o700)           # ours: keep what it holds private
        except OSError as exc:
            why = (f"cannot be created ({exc.strerror}); set CPUIFY_CACHE_DIR to a writable "
                   "directory, or CPUIFY_NO_CACHE=1")
        _checked[key] = why
    if why is not None:
        _warn(f"cpuify: the cache directory {path} {why}. Caching is off for this process.")
    return why


def cache_enabled() -> bool:
    """Whether the persistent cache is on: not disabled by CPUIFY_NO_CACHE and its
    directory usable (checked once per process; a refusal is warned about once)."""
    if disabled_by_user():
        return False
    return _check(location()) is None


def reset() -> None:
    """Forget the checks made in this process (tests, or after the environment changed)."""
    with _lock:
        _checked.clear()
        _warned.clear()


def cache_dir(*subdirs: str) -> Path:
    """The directory to write cached things into (created, 0700): the persistent cache, or
    when there is none this process's private temporary directory (removed at exit).
    `subdirs` name a subdirectory (e.g. `cache_dir("programs")`).  Files directly in the
    cache directory and in EVICTABLE_SUBDIRS are removed when least recently used; other
    subdirectories are never touched by eviction (only by `cpuify cache clear`)."""
    base = location() if cache_enabled() else private_dir()
    d = base.joinpath(*subdirs)
    if subdirs:
        try:
            _make_private_dirs(d)
            why = _untrusted(d)
        except OSError as exc:
            why = f"cannot be created ({exc.strerror})"
        if why is not None:
            _warn(f"cpuify: the cache directory {d} {why}. Using a private temporary "
                  "directory instead.")
            d = private_dir().joinpath(*subdirs)
            _make_private_dirs(d)
    return d


def private_dir() -> Path:
    """A directory of this process only (0700), removed at exit and on SIGTERM."""
    global _private
    with _lock:
        if _private is None or not _private.is_dir():
            _private = Path(tempfile.mkdtemp(prefix="cpuify-nocache-"))
            _register_cleanup(_private)
        return _private


# ------------------------------------------------------------------------------------
# temporary files of this process


def _register_cleanup(path: Path) -> None:
    with _lock:
        _cleanup.append(path)
    _install_sigterm_cleanup()


def _unregister_cleanup(path: Path) -> None:
    with _lock:
        if path in _cleanup:
            _cleanup.remove(path)


def remove_temporaries() -> None:
    """Removes this process's temporary directories (idempotent; a forked child leaves
    its parent's alone)."""
    if os.getpid() != _cleanup_pid:     # (a child made without the fork hook)
        return
    with _lock:
        paths = list(_cleanup)
        _cleanup.clear()
    for p in paths:
        shutil.rmtree(p, ignore_errors=True)


atexit.register(remove_temporaries)


def _after_fork_in_child() -> None:
    """A forked child starts with a fresh lock (another thread may have held it at the
    fork) and leaves its parent's temporary directories to the parent."""
    global _lock, _private, _cleanup_pid
    _lock = threading.RLock()
    _cleanup.clear()
    _private = None
    _cleanup_pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def temporary_directory(prefix: str = "cpuify-") -> Iterator[str]:
    """A private temporary directory removed when the block ends (normally or by an
    exception), at exit, and when the process is ended by SIGTERM."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    _register_cleanup(path)
    try:
        yield str(path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
        _unregister_cleanup(path)


_outer_tmpdir: list[str | None] = []     # TMPDIR outside each private_tmpdir() block


@contextlib.contextmanager
def private_tmpdir() -> Iterator[None]:
    """TMPDIR (for this process's tempfile and the tools it runs) set to a private
    directory, removed when the block ends, at exit or on SIGTERM: a tool killed midway
    leaves nothing behind.  `outer_environment()` is the environment outside it."""
    saved_env, saved_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    path = Path(tempfile.mkdtemp(prefix="cpuify-session-"))
    _register_cleanup(path)
    _outer_tmpdir.append(saved_env)
    os.environ["TMPDIR"] = tempfile.tempdir = str(path)
    try:
        yield
    finally:
        tempfile.tempdir = saved_tempdir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        _outer_tmpdir.pop()
        shutil.rmtree(path, ignore_errors=True)
        _unregister_cleanup(path)


def outer_environment() -> dict[str, str]:
    """os.environ with the TMPDIR the process had outside private_tmpdir() (for a program
    the user runs: its temporary files are not cpuify's)."""
    env = dict(os.environ)
    if _outer_tmpdir:
        if _outer_tmpdir[0] is None:
            env.pop("TMPDIR", None)
        else:
            env["TMPDIR"] = _outer_tmpdir[0]
    return env


def run_tool(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`subprocess.run(cmd, capture_output=True, text=True, env=env)` with the tool in a
    process group of its own: when cpuify is ended (SIGTERM, Ctrl-C, an exception) the tool
    and every process it started are killed before the temporary directories go, so none of
    them writes a file there afterwards."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env=env)
    try:
        out, err = proc.communicate()
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


_sigterm_installed = False


def _install_sigterm_cleanup() -> None:
    """In the Python API: when SIGTERM still has its default action, remove the temporary
    directories before dying of it (the process still ends by SIGTERM).  The CLI installs
    its own handler (`on_sigterm`), which exits 143 after the same cleanup."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
            _sigterm_installed = True       # someone else's handler: theirs to decide
            return

        def handler(signum: int, frame: Any) -> None:
            remove_temporaries()
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

        signal.signal(signal.SIGTERM, handler)
        _sigterm_installed = True
    except (ValueError, OSError):   # not the main thread of the main interpreter
        pass


def on_sigterm(signum: int, frame: Any) -> None:
    """The CLI's SIGTERM handler: unwind (context managers remove their temporary
    directories, running tools are stopped), remove the rest, exit with status 143."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)     # once is enough
    raise SystemExit(128 + signum)


# ------------------------------------------------------------------------------------
# entries


class Damaged(Exception):
    """An entry that failed verification (the message says how)."""


def _path_of(name: str) -> Path:
    parts = Path(name).parts
    if not parts or any(p in ("", ".", "..") for p in parts) or Path(name).is_absolute():
        raise ValueError(f"bad cache entry name {name!r}")
    return cache_dir(*parts[:-1]) / parts[-1]


def _atomic_write(path: Path, chunks: list[bytes], mode: int = 0o600) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_TMP_PREFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            for c in chunks:
                f.write(c)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_private_file(path: Path, data: bytes, *, executable: bool = False) -> None:
    """`data` into `path` atomically, readable by this user only (0600; 0700 executable)."""
    _atomic_write(path, [data], 0o700 if executable else 0o600)


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        os.utime(path)


def _damaged(path: Path, why: str) -> None:
    _warn(f"cpuify: cache entry {path} is damaged ({why}); removed, rebuilding it")
    with contextlib.suppress(OSError):
        os.unlink(path)


def encode_entry(name: str, meta: dict[str, Any], data: bytes = b"") -> bytes:
    body = json.dumps({"key": name, "meta": meta}, separators=(",", ":"), sort_keys=True).encode()
    digest = hashlib.sha256(body + data).hexdigest()
    return b"%s %s %d %d\n" % (_MAGIC, digest.encode(), len(body), len(data)) + body + data


def decode_entry(name: str, raw: bytes) -> tuple[dict[str, Any], bytes]:
    """(metadata, data) of an entry's bytes; raises Damaged."""
    end = raw.find(b"\n", 0, 200)
    if end < 0:
        raise Damaged("no header")
    fields = raw[:end].split(b" ")
    if len(fields) != 4 or fields[0] != _MAGIC:
        raise Damaged("not a cpuify cache entry")
    try:
        meta_len, data_len = int(fields[2]), int(fields[3])
    except ValueError:
        raise Damaged("bad header") from None
    body = raw[end + 1:]
    if len(body) != meta_len + data_len:
        raise Damaged(f"{len(body)} bytes where the header says {meta_len + data_len}: truncated")
    if hashlib.sha256(body).hexdigest().encode() != fields[1]:
        raise Damaged("content does not match its SHA-256")
    try:
        doc = json.loads(body[:meta_len])
    except ValueError:
        raise Damaged("metadata is not JSON") from None
    if not isinstance(doc, dict) or doc.get("key") != name or not isinstance(doc.get("meta"), dict):
        raise Damaged("entry belongs to another key")
    return doc["meta"], body[meta_len:]


def read_entry(name: str) -> tuple[dict[str, Any], bytes] | None:
    """The verified (metadata, data) of entry `name`, or None (missing; a damaged one is
    removed with a warning).  Marks the entry used."""
    path = _path_of(name)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        _damaged(path, exc.strerror or str(exc))
        return None
    with os.fdopen(fd, "rb") as f:
        raw = f.read()
    try:
        got = decode_entry(name, raw)
    except Damaged as exc:
        _damaged(path, str(exc))
        return None
    _touch(path)
    return got


def write_entry(name: str, meta: dict[str, Any], data: bytes = b"") -> None:
    """Stores entry `name` (atomically; an unwritable cache only costs a rebuild later)."""
    try:
        path = _path_of(name)
        blob = encode_entry(name, meta, data)
        _atomic_write(path, [blob])
    except OSError:
        return
    _after_store(len(blob))


def drop_entry(name: str) -> None:
    """Removes entry `name` (e.g. its data did not decode)."""
    with contextlib.suppress(OSError, ValueError):
        os.unlink(_path_of(name))


def _file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _blob_name(name: str, digest: str) -> str:
    p = Path(name)
    return str(p.with_name(f"{p.stem}.{digest[:16]}{p.suffix}"))


def load_file(name: str) -> Path | None:
    """The path of the stored file `name` after checking its SHA-256, or None (never
    stored, evicted, or damaged: then removed with a warning)."""
    got = read_entry(name + ".ref")
    if got is None:
        return None
    meta, _ = got
    blob = meta.get("file")
    digest = meta.get("sha256")
    if not isinstance(blob, str) or not isinstance(digest, str) or blob != _blob_name(name, digest):
        _damaged(_path_of(name + ".ref"), "names no stored file")
        return None
    path = _path_of(blob)
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode):
            raise Damaged("not a regular file")
        if st.st_size != meta.get("size"):
            raise Damaged(f"{st.st_size} bytes, {meta.get('size')} stored: truncated or changed")
        if _file_hash(path) != digest:
            raise Damaged("content does not match its SHA-256")
    except FileNotFoundError:
        drop_entry(name + ".ref")        # evicted: rebuilt silently
        return None
    except (Damaged, OSError) as exc:
        _damaged(path, str(exc))
        drop_entry(name + ".ref")
        return None
    _touch(path)
    return path


def store_file(name: str, source: str | os.PathLike[str], *, executable: bool = False) -> Path:
    """Stores the file at `source` (moved or copied) as `name`; returns its path in the
    cache (0700 if `executable`, else 0600).  With no usable cache the file goes to the
    private directory of this process; raises OSError only if even that fails."""
    digest = _file_hash(Path(source))
    size = os.path.getsize(source)
    blob = _blob_name(name, digest)
    path = _path_of(blob)
    mode = 0o700 if executable else 0o600
    try:
        _store_blob(Path(source), path, mode)
        _after_store(size)
        write_entry(name + ".ref", {"file": blob, "sha256": digest, "size": size})
    except OSError:
        # an unwritable cache directory: this process's private directory then
        path = private_dir() / Path(blob).name
        _store_blob(Path(source), path, mode)
    return path


def _store_blob(source: Path, path: Path, mode: int) -> None:
    _atomic_write(path, [source.read_bytes()], mode)


# ------------------------------------------------------------------------------------
# size, eviction, info, clear


@dataclass
class CacheFile:
    path: Path
    size: int
    mtime: float


def _walk(root: Path) -> Iterator[CacheFile]:
    """Every regular file under root (symbolic links are not followed)."""
    stack = [root]
    while stack:
        d = stack.pop()
        try:
            it = list(os.scandir(d))
        except OSError:
            continue
        for e in it:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                elif e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    yield CacheFile(Path(e.path), st.st_size, st.st_mtime)
            except OSError:
                continue


_EVICT_EVERY = 30.0         # seconds between two walks of the directory in one process
# the directory walked, bytes in it at the last walk, bytes written since, when
_usage: dict[str, Any] = {"root": "", "known": -1, "written": 0, "walked": 0.0}


def _after_store(nbytes: int) -> None:
    """Evicts when the cache may be over its limit: walking the whole directory on every
    store would cost more than a small compile, so a process walks it after its first
    store, then when what it wrote since could pass the limit, or every _EVICT_EVERY s."""
    with _lock:
        if _usage["root"] != str(location()):
            _usage.update(root=str(location()), known=-1, written=0)
        _usage["written"] += nbytes
        due = (_usage["known"] < 0 or _usage["known"] + _usage["written"] > max_bytes()
               or time.monotonic() - _usage["walked"] > _EVICT_EVERY)
    if due:
        evict()


# subdirectories whose files are cache entries; any other subdirectory (one made with
# cache_dir("name") for a tree of files used together) is left whole: `cpuify cache clear`
EVICTABLE_SUBDIRS = ("programs", "rtspec")


def _evictable(rel: Path) -> bool:
    return len(rel.parts) == 1 or (len(rel.parts) == 2 and rel.parts[0] in EVICTABLE_SUBDIRS)


# the toolkit directories of `cpuify cuda-home` (nvcc/cuda_home.py): one per version of
# cpuify and its toolkit, `CUDA_HOME_PREFIX` + a key; evicted whole, least recently used
# first, except the one used last and those this process uses (build trees point to them)
CUDA_HOME_PREFIX = "cpuify-cuda-home-"
_homes_in_use: set[str] = set()


def use_directory(path: Path) -> None:
    """Marks a toolkit directory used (its mtime, which eviction orders by) and keeps it
    from eviction in this process."""
    with _lock:
        _homes_in_use.add(path.name)
    _touch(path)


def _remove_tree(path: Path) -> None:
    """Moved aside first (one rename), so a process never finds it half removed."""
    aside = path.with_name(f".{path.name}.evicted-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(path, aside)
    except OSError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def cuda_homes(root: Path | None = None) -> list[CacheFile]:
    """The toolkit directories of `cpuify cuda-home` in the cache: path, bytes of their
    files (links not followed), when last used."""
    root = location() if root is None else root
    out = []
    with contextlib.suppress(OSError):
        for e in os.scandir(root):
            if e.name.startswith(CUDA_HOME_PREFIX) and e.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    out.append(CacheFile(Path(e.path), sum(f.size for f in _walk(Path(e.path))),
                                         e.stat(follow_symlinks=False).st_mtime))
    return out


def evict(limit: int | None = None) -> int:
    """Removes the least recently used files and toolkit directories (`cpuify cuda-home`:
    never the one used last, nor one this process uses) until the cache is within `limit`
    (default `max_bytes()`), and temporary files left by killed processes; returns bytes
    freed."""
    if not cache_enabled():
        return 0
    limit = max_bytes() if limit is None else limit
    root = location()
    files = [f for f in _walk(root) if _evictable(f.path.relative_to(root))]
    now = time.time()
    freed = 0
    live = []
    for f in files:
        if f.path.name.startswith(_TMP_PREFIX):
            if now - f.mtime > _STALE_TMP_SECONDS:
                with contextlib.suppress(OSError):
                    os.unlink(f.path)
                    freed += f.size
            continue
        live.append(f)
    with contextlib.suppress(OSError):
        for e in os.scandir(root):      # a toolkit directory's build left by a killed process
            if (e.name.startswith("." + CUDA_HOME_PREFIX) and e.is_dir(follow_symlinks=False)
                    and now - e.stat(follow_symlinks=False).st_mtime > _STALE_TMP_SECONDS):
                shutil.rmtree(e.path, ignore_errors=True)
    homes = cuda_homes(root)
    total = sum(f.size for f in live) + sum(h.size for h in homes)
    with _lock:
        in_use = set(_homes_in_use)
    newest = max(homes, key=lambda h: h.mtime, default=None)
    old_homes = {h.path for h in homes if h is not newest and h.path.name not in in_use}
    if total > limit:
        units = live + [h for h in homes if h.path in old_homes]
        units.sort(key=lambda f: f.mtime)
        for f in units:
            if total <= limit or f.mtime > now - _IN_USE_SECONDS:
                break
            if f.path in old_homes:
                _remove_tree(f.path)
                total -= f.size
                freed += f.size
                continue
            with contextlib.suppress(OSError):
                os.unlink(f.path)
                total -= f.size
                freed += f.size
    with _lock:
        _usage.update(root=str(root), known=total, written=0, walked=time.monotonic())
    return freed


_KINDS = (("kernel modules", (".bin",)), ("specialized kernels", (".spec",)),
          ("programs (cpuify run)", ("programs/",)), ("runtime libraries", ("libcpuify_", "runtime-")))


def _kind(rel: str) -> str:
    for label, marks in _KINDS:
        for m in marks:
            if rel.endswith(m) or rel.startswith(m) or Path(rel).name.startswith(m):
                return label
    return "other"


def info() -> dict[str, Any]:
    """What `cpuify cache info` prints."""
    root = location()
    state = "enabled"
    if disabled_by_user():
        state = "disabled (CPUIFY_NO_CACHE=1)"
    else:
        why = _untrusted(root) if root.exists() else None
        if why is not None:
            state = f"refused: {root} {why}"
    counts: dict[str, int] = {}
    sizes: dict[str, int] = {}
    total = 0
    n = 0
    if root.is_dir():
        home_label = "toolkit directories (cpuify cuda-home)"
        for h in cuda_homes(root):
            counts[home_label] = counts.get(home_label, 0) + 1
            sizes[home_label] = sizes.get(home_label, 0) + h.size
            total += h.size
            n += 1
        for f in _walk(root):
            rel = str(f.path.relative_to(root))
            if rel.startswith(CUDA_HOME_PREFIX):
                continue            # counted above, one entry per directory
            if f.path.name.startswith(_TMP_PREFIX) or rel.endswith((".ref", ".deps")):
                total += f.size
                continue
            k = _kind(rel)
            counts[k] = counts.get(k, 0) + 1
            sizes[k] = sizes.get(k, 0) + f.size
            total += f.size
            n += 1
    return {"location": str(root), "state": state, "entries": n, "kinds": counts,
            "kind_bytes": sizes, "total_bytes": total, "limit_bytes": max_bytes()}


def clear() -> int:
    """Removes everything in the cache directory (a directory of another user is left
    alone: ValueError); makes it private (0700) again.  Returns bytes freed."""
    root = location()
    if not root.exists():
        return 0
    st = os.stat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise ValueError(f"{root} is not a directory")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise ValueError(f"{root} is owned by another user (uid {st.st_uid}); not touching it")
    freed = sum(f.size for f in _walk(root))
    for e in os.scandir(root):
        if e.is_dir(follow_symlinks=False):
            shutil.rmtree(e.path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(e.path)
    os.chmod(root, 0o700)
    with _lock:
        _checked.pop(str(root), None)
    return freed
