"""The output rule: where a job may write, what it may replace, and how it moves its result into place.

- An output may never be, contain or sit inside an input: model and adapter folders, any folder their files
  resolve into (symbolic links, `..`), and the Hugging Face cache. Paths are compared as resolved real paths.
- Only an earlier Mergesmith output is ever replaced: every output holds a marker file (`MARKER`, with its kind,
  time, version and the files it was written with), and a folder without it, or holding anything else, is
  refused, naming what is there. A symbolic link at the destination is never followed: it is refused.
- The finished output is renamed into place without replacing anything (`renameat2(RENAME_NOREPLACE)` on Linux,
  `renamex_np(RENAME_EXCL)` on macOS, an exclusive `mkdir` then a rename elsewhere), so a folder that appeared
  while the job ran is never replaced; a lock file per destination stops two jobs writing to one place at once.
- Replacing moves the old output aside into a hidden folder, renames the new one in, then deletes the old one.
  Hidden staging and retired folders left by a killed run are removed by `clean_leftovers` at every job's start,
  only when their name is Mergesmith's and the process that made them is gone.

Nothing here imports torch or Qt, so the window can ask the same questions before it starts a job.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import json
import os
import re
import shutil
import stat
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import psutil

from guiapp import __version__
from guiapp.errors import OutputError, Remedy
from guiapp.facts.wording import say
from guiapp.system.bounded import describe_value
from guiapp.system.paths import expanded, resolved
from guiapp.system.units import format_bytes

MARKER = ".mergesmith-output.json"
# A marker is a few kilobytes (one line per output file); anything far larger is not one of ours.
_MARKER_BYTES = 1_000_000
# Walking a folder to describe it or to find where an input's links point stops after this many entries.
_WALK_LIMIT = 10_000
_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.mergesmith-(?P<what>partial|old)-(?:(?P<pid>\d+)-)?[0-9a-f]{8}$")
_LOCK = re.compile(r"^\.(?P<name>.+)\.mergesmith-lock$")

# Staging and retired folders this process is using now: `clean_leftovers` never removes them.
_in_use: set[Path] = set()
_in_use_guard = threading.Lock()


@dataclass(frozen=True)
class PreviousOutput:
    """What an earlier output's marker says about it: kind ("merge", "extract", "apply"), when, which files."""

    folder: Path
    kind: str
    created: str
    files: tuple[str, ...]
    total_bytes: int
    identity: str

    def describe(self) -> str:

        return (f"an earlier Mergesmith {self.kind} output from {self.created} ({len(self.files)} files, "
                f"{format_bytes(self.total_bytes)})")


def staging_name(destination: Path, what: str) -> Path:
    """A hidden sibling of `destination` for a staging ("partial") or retired ("old") folder of this process."""
    return destination.parent / f".{destination.name}.mergesmith-{what}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def lock_path(destination: Path) -> Path:
    return destination.parent / f".{destination.name}.mergesmith-lock"


def absolute_destination(destination: Path | str) -> Path:
    """`destination` made absolute with its parent resolved, its own name kept (a link there is not followed)."""
    path = expanded(destination)
    path = Path(os.path.abspath(path))  # removes `..` the way the user meant it, before links are resolved
    return resolved(path.parent) / path.name


def free_destination(destination: Path | str) -> Path:
    """`destination` when nothing is there, else the first free `name-2`, `name-3`… beside it.

    A name that is already one of these counts on ("merged" and "merged-2" taken: "merged-3"), while a name whose
    number is its own ("llama-3" taken, "llama" not) gets "llama-3-2". Free means no file, folder, link or job
    lock there now: a suggestion, not a reservation (the job checks its output again when it starts).
    """
    path = absolute_destination(destination)
    numbered = re.fullmatch(r"(?P<stem>.+)-(?P<number>\d+)", path.name)
    if numbered and os.path.lexists(path.with_name(numbered["stem"])):
        stem, number = numbered["stem"], int(numbered["number"])
    else:
        stem, number = path.name, 1
    candidate = path
    while os.path.lexists(candidate) or os.path.lexists(lock_path(candidate)):
        number += 1
        candidate = path.with_name(f"{stem}-{number}")
    return candidate


def hugging_face_cache() -> Path:
    """The Hugging Face cache folder in use (huggingface_hub's setting, read now)."""
    from guiapp.hub.connection import HubConnection  # noqa: PLC0415 - the cache location is asked when a job starts, not at import

    return HubConnection.current().cache_dir


@dataclass(frozen=True)
class Protected:
    """A resolved folder an output must keep clear of, how a message names it, and whether an output may be
    created inside it (only for folders an input's links point into: a new folder there deletes nothing)."""

    folder: Path
    label: str
    inside_allowed: bool = False


def protected_folders(inputs: Iterable[Path]) -> list[Protected]:
    """The inputs themselves, every folder a symbolic link inside them resolves into, and the Hugging Face cache."""
    protected: list[Protected] = []
    for source in inputs:
        source = expanded(source)
        protected.append(Protected(resolved(source), f"the input {source}"))
        for target in _link_targets(source):
            protected.append(Protected(target, f"the folder {target}, which the input {source} links into", True))
    protected.append(Protected(resolved(hugging_face_cache()), "the Hugging Face cache"))
    return protected


def _clashes(candidate: Path, protected: Protected) -> bool:
    """Whether writing at `candidate` would be, contain or sit inside the `protected` folder."""
    folder = protected.folder
    inside = folder in candidate.parents and not protected.inside_allowed
    return candidate == folder or inside or candidate in folder.parents


def _free_beside(path: Path, folder: Path, protected: list[Protected]) -> Path | None:
    """A free folder named like `path` beside the input `folder` it clashes with (beside `path` itself when it
    holds that input), clear of every protected folder; None when there is none such."""
    place = path.parent if path in folder.parents else folder.parent
    try:
        suggestion = free_destination(place / path.name)
    except OSError:
        return None
    clear = all(not _clashes(c, p) for c in {suggestion, resolved(suggestion)} for p in protected)
    return suggestion if clear else None


def check_output_location(destination: Path | str, inputs: Iterable[Path], *, replace: bool) -> PreviousOutput | None:
    """Check that a job may write its output at `destination`; return the earlier output it will replace, if any.

    Raises OutputError, saying why and what to do, when the destination is, contains or sits inside an input or
    the Hugging Face cache, is a symbolic link, is a file, sits under a file, or exists and either `replace` is
    False (the error offers to retry with overwrite only for an earlier Mergesmith output) or it is not an
    earlier Mergesmith output holding nothing else. Nothing is created or changed.
    """
    if "\0" in str(destination):
        raise OutputError(f"The output folder {describe_value(str(destination))} holds a NUL character, which no "
                          "folder name can hold.", hint="Retype the output folder's name.")
    path = absolute_destination(destination)
    existing = _check_parent(path)
    _check_not_a_system_folder(path, existing)
    _check_name_lengths(path, existing)
    protected_list = protected_folders(inputs)
    for candidate in {path, resolved(path)}:
        for protected in protected_list:
            folder = protected.folder
            if _clashes(candidate, protected):
                relation = "is" if candidate == folder else "contains" if candidate in folder.parents else "is inside"
                beside = _free_beside(path, folder, protected_list)
                raise OutputError(
                    f"The output folder {path} {relation} {protected.label}.",
                    why="Writing there could replace or mix with the files the job reads; Mergesmith never "
                    "writes into, over or around its inputs, with or without overwrite.",
                    hint="Choose an output folder outside every input model, adapter and the Hugging Face cache"
                    + (f", such as {beside}." if beside else "."),
                    remedy=new_folder_remedy(beside, beside_models=True) if beside else None,
                )
    if not os.path.lexists(path):
        return None
    if path.is_symlink():
        raise OutputError(
            f"{path} is a link to {resolved(path)}, and Mergesmith does not write through links.",
            why="Replacing it would delete the folder the link points to, which may hold anything.",
            hint="Choose the real folder itself, or a new name.",
        )
    if not path.is_dir():
        raise OutputError(f"{path} exists and is a file, not a folder.", hint="Choose another name for the output.")
    previous = read_marker(path)
    empty = not any(path.iterdir())
    if previous is None and not empty:
        raise OutputError(
            f"{path} already exists and was not made by Mergesmith: it holds {describe_folder(path)}.",
            why="Mergesmith replaces only its own earlier outputs (they hold a "
            f"{MARKER} file), so nothing else can be lost.",
            hint="Choose a new output folder, or move that folder away yourself if you no longer need it.",
        )
    if previous is not None:
        extra = foreign_entries(path, previous)
        if extra:
            raise OutputError(
                f"{path} is {previous.describe()}, but it also holds files Mergesmith did not write there: "
                f"{_some(extra)}.",
                why="Replacing it would delete those files too.",
                hint="Move those files out of the folder, or choose a new output folder.",
            )
    if not replace:
        what = previous.describe() if previous is not None else "an empty folder"
        new_name = free_destination(path)
        raise OutputError(
            f"{path} already exists ({what}).",
            why="Mergesmith never writes over an existing folder unless asked to, so nothing there is lost.",
            hint=say("Use a new name ({name}), or {replace_existing} (the old folder is replaced only once the new "
                 "output is complete).", name=new_name.name),
            remedy=new_folder_remedy(new_name),  # the safe suggestion comes first
            replace_with=REPLACE_OUTPUT,  # deleting the old output is a separate, explicit choice
        )
    return previous


# Replacing the existing output folder (once the new output is complete).
REPLACE_OUTPUT = Remedy("overwrite", True, "replacing the existing folder")


def new_folder_remedy(folder: Path, *, beside_models: bool = False) -> Remedy:
    """The remedy that writes to `folder` instead: "with a new name: merged-2", or, for an output moved out of an
    input model, "in models/merged, beside the models"."""
    label = (f"in {folder.parent.name}/{folder.name}, beside the models" if beside_models else
             f"with a new name: {folder.name}")
    return Remedy("output", str(folder), label)


def read_marker(folder: Path) -> PreviousOutput | None:
    """The marker of an earlier Mergesmith output in `folder`, or None when there is no valid one."""
    marker = Path(folder) / MARKER
    try:
        info = os.lstat(marker)
        if not stat.S_ISREG(info.st_mode) or info.st_size > _MARKER_BYTES:
            return None
        data = json.loads(marker.read_text(encoding="utf-8"))
        files = tuple(str(name) for name in data["files"])
        return PreviousOutput(Path(folder), str(data["kind"]), str(data["created"]), files, int(data["bytes"]),
                              str(data["id"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def deletable_output(folder: Path) -> PreviousOutput:
    """The earlier Mergesmith output in `folder`, checked to be safe to delete whole.

    Raises OutputError when `folder` holds no valid marker (not ours, or no longer ours) or holds files the marker
    does not list (something the user put there).
    """
    folder = Path(folder)
    previous = read_marker(folder)
    if previous is None:
        raise OutputError(f"{folder} is not a folder Mergesmith wrote (or no longer one), so it was not deleted.",
                          hint="Delete it in your file manager if you are sure you no longer need it.")
    foreign = foreign_entries(folder, previous)
    if foreign:
        raise OutputError(f"{folder} holds files Mergesmith did not write ({_some(foreign)}), so it was not deleted.",
                          why="Deleting the folder would delete them too.",
                          hint="Move those files elsewhere, or delete the folder in your file manager.")
    return previous


def delete_output(folder: Path) -> int:
    """Delete the earlier Mergesmith output in `folder`: the files its marker lists, the marker, then the folder
    if nothing else is left in it. Returns the bytes freed.

    Raises OutputError, deleting nothing, when `deletable_output` refuses it or a job is writing to it now.
    """
    folder = Path(folder)
    previous = deletable_output(folder)
    lock = DestinationLock(folder)
    lock.acquire()
    try:
        freed = 0
        for name in (*previous.files, MARKER):
            path = folder / name
            try:
                freed += os.lstat(path).st_size
                os.unlink(path)
            except FileNotFoundError:
                pass
        for sub in sorted({Path(name).parent for name in previous.files}, key=lambda p: len(p.parts), reverse=True):
            if sub != Path("."):
                _remove_empty_folder(folder / sub)
    finally:
        lock.release()
    _remove_empty_folder(folder)
    return freed


def write_marker(folder: Path, kind: str) -> None:
    """Write the marker into the finished output `folder`, listing the files it holds now.

    Raises OSError when it cannot be written (callers map a full disk to InsufficientResourcesError).
    """
    files = sorted(_relative_files(folder))
    total = sum((folder / name).stat().st_size for name in files)
    record = {"mergesmith": __version__, "kind": kind, "created": time.strftime("%Y-%m-%d %H:%M:%S"),
              "id": uuid.uuid4().hex, "bytes": total, "files": files}
    (folder / MARKER).write_text(json.dumps(record, indent=1), encoding="utf-8")


def foreign_entries(folder: Path, previous: PreviousOutput) -> list[str]:
    """Entries of `folder` that its marker does not list: what replacing it would delete besides its own files."""
    known = set(previous.files) | {MARKER}
    return sorted(name for name in _relative_files(folder, with_folders=True) if name not in known
                  and not any(listed.startswith(name + "/") for listed in known))


def describe_folder(folder: Path) -> str:
    """A short description of what `folder` holds: "3 files, 1.2 GB: a.txt, b.bin, notes …" (bounded walk)."""

    count, size = 0, 0
    for name in _relative_files(folder):
        count += 1
        try:
            size += os.lstat(folder / name).st_size
        except OSError:
            pass
    files = f"more than {_WALK_LIMIT} files" if count >= _WALK_LIMIT else f"{count} file{'s' * (count != 1)}"
    return f"{files}, {format_bytes(size)}: {_some(sorted(os.listdir(folder)))}"


def move_into_place(staging: Path, destination: Path, previous: PreviousOutput | None, *, replace: bool) -> None:
    """Rename the finished `staging` folder to `destination` without ever replacing what appeared meanwhile.

    With `previous` (the earlier output `check_output_location` found), that output is moved aside into a hidden
    retired folder, checked to still be it, the new one renamed in, and the old one deleted. With `replace`, an
    empty folder at the destination is removed first. Raises OutputError when the destination appeared or changed
    while the job ran (nothing there is touched; an earlier output moved aside is put back).
    """
    if previous is not None:
        _replace_previous(staging, destination, previous)
        return
    try:
        rename_noreplace(staging, destination)
        return
    except FileExistsError:
        if not (replace and _remove_empty_folder(destination)):
            raise _appeared(destination) from None
    try:
        rename_noreplace(staging, destination)
    except FileExistsError:
        raise _appeared(destination) from None


def rename_noreplace(source: Path, destination: Path) -> None:
    """Rename `source` to `destination`, failing with FileExistsError if anything exists there.

    Linux: renameat2(RENAME_NOREPLACE); macOS: renamex_np(RENAME_EXCL); Windows: a rename never replaces there.
    Where the file system lacks those, `destination` is created exclusively (mkdir) and the folder renamed over
    that empty folder, which a rename replaces only while it is still empty. Raises OSError for other failures.
    """
    if sys.platform == "win32":
        os.rename(source, destination)
        return
    if _native_rename_noreplace(source, destination):
        return
    os.mkdir(destination)  # FileExistsError when something is there: nothing was replaced
    try:
        os.rename(source, destination)
    except OSError as error:
        _remove_empty_folder(destination)
        if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(destination)) from None
        raise


class DestinationLock:
    """An exclusive lock on one destination, held by one job from its start to its end (a hidden lock file
    next to the destination, locked with flock; the operating system releases it when a process dies)."""

    def __init__(self, destination: Path) -> None:
        self.destination = destination
        self.path = lock_path(destination)
        self._descriptor: int | None = None

    def acquire(self) -> None:
        """Take the lock. Raises OutputError when another job holds it, OSError when it cannot be created."""
        descriptor = _try_lock(self.path)
        if descriptor is None:
            raise OutputError(
                f"Another Mergesmith job is writing to {self.destination} right now.",
                why="Two jobs writing to one folder would end with one silently replacing the other.",
                hint="Wait for that job to finish, or choose another output folder.",
            )
        self._descriptor = descriptor

    def release(self) -> None:
        """Remove the lock file and release the lock (harmless when not held)."""
        if self._descriptor is not None:
            _unlock(self.path, self._descriptor)
            self._descriptor = None


def mark_in_use(path: Path) -> None:
    """Record that this process is using the staging or retired folder `path` (never cleaned meanwhile)."""
    with _in_use_guard:
        _in_use.add(Path(path))


def done_with(path: Path) -> None:
    with _in_use_guard:
        _in_use.discard(Path(path))


def clean_leftovers(parent: Path) -> list[Path]:
    """Remove what killed runs left in `parent`: Mergesmith's hidden staging and retired folders whose process is
    gone, and lock files nobody holds. Links and files with such names are left alone. Returns what was removed;
    never raises (a folder that cannot be removed is tried again at the next start)."""
    removed: list[Path] = []
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return removed
    for entry in entries:
        path = Path(entry.path)
        try:
            leftover = _LEFTOVER.match(entry.name)
            if leftover and entry.is_dir(follow_symlinks=False) and _owner_gone(leftover.group("pid"), path):
                shutil.rmtree(path, ignore_errors=True)
                if not os.path.lexists(path):
                    removed.append(path)
            elif _LOCK.match(entry.name) and entry.is_file(follow_symlinks=False):
                descriptor = _try_lock(path, create=False)
                if descriptor is not None:
                    _unlock(path, descriptor)
                    removed.append(path)
        except OSError:
            continue
    return removed


# --- helpers ----------------------------------------------------------------------------------------------------


def _link_targets(folder: Path) -> set[Path]:
    """The folders symbolic links inside `folder` resolve into (a linked file's folder), bounded walk."""
    targets: set[Path] = set()
    seen = 0
    for root, folders, files in os.walk(folder):
        for name in folders + files:
            seen += 1
            path = os.path.join(root, name)
            if os.path.islink(path):
                target = resolved(Path(path))
                targets.add(target if target.is_dir() else target.parent)
        if seen >= _WALK_LIMIT:
            break
    return targets


# Linux's views of the running system (processes, devices, the kernel's settings): files there are made by the
# kernel, and creating one fails as if the folder were missing.
SYSTEM_FOLDERS = (Path("/proc"), Path("/sys"))


def _check_not_a_system_folder(path: Path, existing: Path) -> None:
    """OutputError when `path` would be inside /proc or /sys (`existing`, its nearest existing parent, resolved)."""
    if not sys.platform.startswith("linux"):
        return
    where = resolved(existing)
    for system in SYSTEM_FOLDERS:
        if where == system or system in where.parents:
            raise OutputError(
                f"The output folder {path} is inside {system}, a system folder that shows the running system's "
                "state and cannot hold files.",
                hint="Choose an output folder in your home folder or on a data disk.",
            )


def _check_parent(path: Path) -> Path:
    """The nearest of `path`'s parents that exists; OutputError when it is not a folder."""
    for ancestor in path.parents:
        if os.path.lexists(ancestor):
            if not ancestor.is_dir():
                raise OutputError(
                    f"{ancestor} is a file, so the output folder {path} cannot be created inside it.",
                    hint="Choose an output folder in a folder that exists, or under a new folder name.",
                )
            return ancestor
    return Path(path.anchor or "/")


def _check_name_lengths(path: Path, existing: Path) -> None:
    """Refuse, before anything is written, a folder name the disk holding `existing` (the nearest parent of `path`
    that exists) would refuse: the output's own name must leave room for the hidden staging folder's longer name
    beside it. Lengths are of the names' bytes on disk, whatever their encoding (a name need not be UTF-8)."""
    try:
        limit = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):  # not answered here (Windows has no pathconf): the usual limit
        limit = 255
    for part in path.relative_to(existing).parts[:-1]:
        if len(os.fsencode(part)) > limit:
            raise OutputError(
                f"The folder name {describe_value(part)} in the output path is {len(os.fsencode(part))} bytes long; "
                f"names on this disk can have at most {limit}.",
                hint="Choose an output folder with shorter folder names.",
            )
    name = len(os.fsencode(path.name))
    added = len(os.fsencode(staging_name(path, "partial").name)) - name
    if name + added > limit:
        raise OutputError(
            f"The output folder's name is {name} bytes long, too long for this disk: names there can have at most "
            f"{limit} bytes, and the unfinished folder Mergesmith writes first adds {added} to it.",
            hint=f"Choose a shorter name for the output folder: at most {limit - added} plain letters and digits.",
        )


def _relative_files(folder: Path, *, with_folders: bool = False) -> Iterable[str]:
    """Paths under `folder` relative to it, with "/" (links not followed), at most `_WALK_LIMIT` of them."""
    count = 0
    for root, folders, files in os.walk(folder):
        relative = Path(root).relative_to(folder)
        names = files + [name for name in folders if os.path.islink(os.path.join(root, name))]
        if with_folders:
            names += [f"{name}" for name in folders if not os.path.islink(os.path.join(root, name))]
        for name in names:
            count += 1
            yield (relative / name).as_posix()
            if count >= _WALK_LIMIT:
                return


def _some(names: list[str], shown: int = 3) -> str:
    if not names:
        return "nothing"
    rest = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + rest


def _appeared(destination: Path) -> OutputError:
    return OutputError(
        f"{destination} appeared while the job was running, so the new output was not put there and nothing "
        "there was replaced.",
        why="Another program or job created it after this job checked the destination.",
        hint="Choose a new output folder and run the job again.",
    )


def _remove_empty_folder(path: Path) -> bool:
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    try:
        os.rmdir(path)  # fails unless it is empty, at the moment it runs
    except OSError:
        return False
    return True


def _replace_previous(staging: Path, destination: Path, previous: PreviousOutput) -> None:
    retired = staging_name(destination, "old")
    mark_in_use(retired)
    try:
        try:
            os.rename(destination, retired)  # the entry as it is now, whatever it has become (a link is not followed)
        except FileNotFoundError:  # removed meanwhile: nothing left to replace
            move_into_place(staging, destination, None, replace=False)
            return
        now = None if os.path.islink(retired) else read_marker(retired)
        if now is None or now.identity != previous.identity or foreign_entries(retired, now):
            kept = _put_back(retired, destination)
            raise OutputError(
                f"{destination} changed while the job was running: it is no longer {previous.describe()}, so it "
                f"was not replaced{'' if kept == destination else f' (it was kept as {kept})'}.",
                why="Mergesmith replaces only its own earlier outputs, checked again at the moment of replacing.",
                hint="Choose a new output folder and run the job again.",
            )
        try:
            rename_noreplace(staging, destination)
        except FileExistsError:
            kept = _put_back(retired, destination)
            raise OutputError(
                f"{destination} appeared again while the job was replacing it, so the new output was not put "
                f"there. The earlier output was kept as {kept}.",
                why="Another program or job created it at the same moment.",
                hint="Choose a new output folder and run the job again.",
            ) from None
        shutil.rmtree(retired, ignore_errors=True)  # what cannot be deleted now is removed at a later start
    finally:
        done_with(retired)


def _put_back(retired: Path, destination: Path) -> Path:
    """Rename a folder moved aside back to `destination`, or, if something is there now, to a visible name."""
    try:
        rename_noreplace(retired, destination)
        return destination
    except FileExistsError:
        visible = destination.parent / f"{destination.name}-previous-{uuid.uuid4().hex[:8]}"
        rename_noreplace(retired, visible)
        return visible


def _owner_gone(pid: str | None, path: Path) -> bool:
    if pid is None:  # the name earlier versions gave retired folders
        return True
    if int(pid) == os.getpid():
        with _in_use_guard:
            return path not in _in_use

    return not psutil.pid_exists(int(pid))


_AT_FDCWD, _RENAME_NOREPLACE, _RENAME_EXCL = -100, 1, 4
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP}


def _native_rename_noreplace(source: Path, destination: Path) -> bool:
    """The kernel's own rename-without-replacing; False when this system or file system does not have it."""
    libc = _libc()
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        result = libc.renameat2(_AT_FDCWD, os.fsencode(source), _AT_FDCWD, os.fsencode(destination),
                                _RENAME_NOREPLACE)
    elif sys.platform == "darwin" and hasattr(libc, "renamex_np"):
        result = libc.renamex_np(os.fsencode(source), os.fsencode(destination), _RENAME_EXCL)
    else:
        return False
    if result == 0:
        return True
    error = ctypes.get_errno()
    if error in _UNSUPPORTED:
        return False
    raise OSError(error, os.strerror(error), str(source), None, str(destination))


_libc_handle: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc_handle


def _try_lock(path: Path, *, create: bool = True) -> int | None:
    """Lock the file `path` exclusively without waiting: its descriptor, or None when another process holds it.

    A holder removes the file when it releases it, so after locking, the file must still be the one at `path`.
    """
    while True:
        flags = os.O_RDWR | getattr(os, "O_CLOEXEC", 0) | (os.O_CREAT if create else 0)
        try:
            descriptor = os.open(path, flags, 0o644)
        except FileNotFoundError:
            if create:
                raise
            return None
        if not _lock_descriptor(descriptor):
            os.close(descriptor)
            return None
        try:
            if os.stat(path).st_ino == os.fstat(descriptor).st_ino:
                return descriptor
        except FileNotFoundError:
            pass
        os.close(descriptor)  # the holder removed it just before we locked it: take the new one
        if not create:
            return None


def _lock_descriptor(descriptor: int) -> bool:
    try:
        if sys.platform == "win32":
            import msvcrt  # noqa: PLC0415 - exists on Windows only

            msvcrt.locking(descriptor, msvcrt.LK_NBLCK, 1)
        else:
            import fcntl  # noqa: PLC0415 - exists outside Windows only

            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK, errno.EDEADLK):
            return False
        raise
    return True


def _unlock(path: Path, descriptor: int) -> None:
    try:
        os.unlink(path)  # while still locked, so no other job can be holding this file
    except OSError:
        pass  # Windows cannot remove an open file: it is removed at a later start
    os.close(descriptor)
