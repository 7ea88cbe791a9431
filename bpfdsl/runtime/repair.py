"""Repair what an operation cut short (SIGKILL, a crash) left, from its intent record
(:mod:`bpfdsl.runtime.intent`) and the kernel's state: roll forward when the new
program is attached (finish the pin moves), roll back otherwise (remove the staging
dir), so the interface has the old or the new program and the pins of that one only.
A topology apply is rolled back change by change from its journal, or finished past its
point of no return; a topology down is finished (:mod:`bpfdsl.runtime.topology_journal`).
Also: who owns the XDP program on an interface (a bpfdsl pin dir, or another tool), and
which records wait for a repair (:func:`pending`, read only).
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterator
from dataclasses import dataclass

from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import netlink, syscall
from bpfdsl.runtime import attach, pins
from bpfdsl.runtime import topology_journal as journal
from bpfdsl.runtime.intent import read_intents
from bpfdsl.runtime.oplock import LockKey, OpLocks, is_held, netns_inode


@dataclass(frozen=True, slots=True)
class Owner:
    """The bpfdsl pin dir (with a manifest) pinning an attachment's link or program, and
    the command that made it (``attach`` or ``load``)."""

    dir: str
    made_by: str


def owner_of(cur: attach.XdpAttachment) -> Owner | None:
    """The bpfdsl pin dir of attachment ``cur`` (its link's pin, else its program's), or
    None: a program bpfdsl did not attach (ip, xdp-loader, a libxdp dispatcher)."""
    dirs: list[str] = []
    if cur.link_id is not None:
        dirs = [os.path.dirname(p) for p in attach._pins_of_link(cur.link_id, (attach.BPFFS,))]
    dirs += pins.dirs_pinning_prog(cur.prog_id)
    for d in dirs:
        m = pins.read_manifest(d)
        if m is not None:
            return Owner(d, str(m.get("made_by", "load")))
    return None


def prog_ids_in(pin_dir: str) -> set[int]:
    """Ids of the programs pinned in ``pin_dir/progs``."""
    out: set[int] = set()
    for path in glob.glob(os.path.join(glob.escape(pin_dir), "progs", "*")):
        try:
            with syscall.obj_get(path) as fd:
                if syscall.fd_kind(int(fd)) == "prog":
                    out.add(int(syscall.prog_info(fd).id))
        except (syscall.BpfError, OSError):
            continue
    return out


def live_links_in(pin_dir: str) -> list[str]:
    """Link pins (``link_*``) in ``pin_dir`` whose link still runs a program."""
    out = []
    for path in sorted(glob.glob(os.path.join(glob.escape(pin_dir), "link_*"))):
        try:
            with syscall.obj_get(path) as fd:
                if syscall.fd_kind(int(fd)) == "link" and syscall.link_info(fd).prog_id:
                    out.append(path)
        except (syscall.BpfError, OSError):
            continue
    return out


def release_pin_dir(pin_dir: str) -> str:
    """After its attachment was taken over: remove ``pin_dir`` when ``bpfdsl attach``
    made it and no link of it is left; else keep it.  Returns what was done."""
    if not os.path.isdir(pin_dir):
        return ""
    made_by = (pins.read_manifest(pin_dir) or {}).get("made_by", "")
    if made_by == "attach" and not live_links_in(pin_dir):
        try:
            maps = sorted(os.listdir(os.path.join(pin_dir, "maps")))
        except OSError:
            maps = []
        # the global data (.rodata, .data, .bss: configs and globals) is the object's own
        maps = [m for m in maps if m.split(".")[0] not in ("rodata", "data", "bss")]
        pins.remove_tree(pin_dir)
        if not maps:
            return f"removed {pin_dir} (the replaced program's pins)"
        return (
            f"removed {pin_dir} (the replaced program's pins): the state of its maps "
            f"{', '.join(maps)} is gone with it; to keep maps across a replace, attach the "
            f"new object with `--pin-dir {pin_dir}` (maps of the same definition are kept)"
        )
    return (
        f"{pin_dir} stays pinned, not attached here any more (`bpfdsl unload {pin_dir}` removes it)"
    )


class _Elsewhere(Exception):
    """A record of another namespace not named under /run/netns: repaired there."""


@contextlib.contextmanager
def _in_netns_of(rec: dict) -> Iterator[bool]:
    """Run the body in the record's network namespace; yields False when it is gone
    (no interface to look at), raises _Elsewhere when it cannot be entered here."""
    ns = int(rec.get("netns", 0))
    if ns == netns_inode():
        yield True
        return
    name = rec.get("netns_name")
    if not name:
        raise _Elsewhere("namespace not reachable")
    path = os.path.join(netlink.NETNS_RUN_DIR, name)
    try:
        same = os.stat(path).st_ino == ns
    except OSError:
        same = False
    if not same:
        yield False
        return
    with netlink.in_netns(name):
        yield True


def _attached_prog(rec: dict) -> int:
    """Program id attached now on the record's interface (0: none, or it is gone)."""
    try:
        st = netlink.xdp_state(int(rec["ifindex"]))
    except (DiagnosticError, OSError):
        return 0
    return int(st.prog_id or st.drv_prog_id or st.skb_prog_id or 0)


def _repair_attach(rec: dict) -> str:
    dev, target, staging = rec.get("dev", "?"), rec["target"], rec.get("staging")
    over = rec.get("over")
    now = _attached_prog(rec)
    new_ids = set(rec.get("new_prog_ids") or [])
    if staging and os.path.isdir(staging):
        new_ids |= prog_ids_in(staging)
    if now and now in new_ids:  # the new program runs: roll forward
        home = staging if staging and os.path.isdir(staging) else target
        link = attach.find_xdp_link(int(rec["ifindex"]), now)
        if link is not None and home:
            cur = attach.XdpAttachment(dev, int(rec["ifindex"]), "", "link", now, "", link[0])
            attach.move_link_pin(cur, attach.link_pin_path(home, dev))
        done = []
        if over:
            if what := release_pin_dir(over):
                done.append(what)
        if staging and os.path.isdir(staging):
            if os.path.isdir(target):
                pins.remove_tree(target)
            os.rename(staging, target)
            done.append(f"moved {staging} to {target}")
        return f"the new program (id {now}) was attached on {dev}: finished" + (
            f" ({'; '.join(done)})" if done else ""
        )
    by_name = _by_name_note(remove_by_name_pins(rec))
    if staging and os.path.isdir(staging):
        pins.remove_tree(staging)
        old = f"program id {now} stays attached" if now else f"nothing is attached on {dev}"
        return f"it had not attached on {dev}: rolled back, removed {staging} ({old}){by_name}"
    return f"it had not changed {dev}: nothing to repair" + by_name


def remove_by_name_pins(rec: dict) -> list[str]:
    """Remove the maps the record's operation pinned by name (``by_name_pins``: path ->
    the id of the map it created) that still hold that map; returns the paths removed."""
    out = []
    for path, map_id in sorted((rec.get("by_name_pins") or {}).items()):
        try:
            with syscall.obj_get(path) as fd:
                same = syscall.fd_kind(int(fd)) == "map" and syscall.map_info(fd).id == map_id
        except (syscall.BpfError, OSError):
            continue  # gone (or never pinned: killed before)
        if same:
            with contextlib.suppress(OSError):
                os.unlink(path)
                out.append(path)
    return out


def _by_name_note(removed: list[str]) -> str:
    return f"; removed its maps pinned by name: {', '.join(removed)}" if removed else ""


def _repair_detach(rec: dict) -> str:
    dev, prog_id = rec.get("dev", "?"), int(rec.get("prog_id", 0))
    if prog_id and _attached_prog(rec) == prog_id:
        return f"it had not detached program id {prog_id} from {dev}: nothing changed"
    removed = []
    for path in rec.get("link_pins") or []:
        with contextlib.suppress(OSError):
            os.unlink(path)
    for d in rec.get("remove") or []:
        if os.path.isdir(d):
            pins.remove_tree(d)
            removed.append(d)
    pins.remove_root_if_empty()
    return f"program id {prog_id} was detached from {dev}: finished" + (
        f" (removed {', '.join(removed)})" if removed else ""
    )


def _repair_unload(rec: dict) -> str:
    d = rec["dir"]
    if not os.path.isdir(d):
        return f"{d} was removed already"
    pins.unpin_dir(d) if pins.read_manifest(d) is not None else pins.remove_tree(d)
    pins.remove_root_if_empty()
    return f"finished removing {d}"


def _repair_load(rec: dict) -> str:
    d = rec["dir"]
    if os.path.isdir(d) and pins.read_manifest(d) is not None:
        return f"{d} was complete: kept"
    by_name = _by_name_note(remove_by_name_pins(rec))
    if not os.path.isdir(d):
        return f"nothing was pinned in {d}{by_name}"
    pins.remove_tree(d)
    pins.remove_root_if_empty()
    return f"{d} was pinned only in part: removed it{by_name}"


def roll_back_topology(rec: dict) -> list[str]:
    """Undo the topology apply of intent record ``rec`` (its journal, staging dirs, the
    maps it pinned by name): what the command does on a failure or SIGTERM and a repair
    after SIGKILL.  Returns what could not be undone ([]: the state before it is back)."""
    failed = journal.roll_back(rec)
    remove_by_name_pins(rec)
    return failed


def _repair_topology_apply(rec: dict) -> str:
    pin_dir = rec.get("pin_dir", "?")
    if "commit" in rec:  # past its point of no return: every change was made and checked
        notes = journal.finish(rec)
        return f"it had made every change in {pin_dir}: finished" + (
            f" ({'; '.join(notes)})" if notes else ""
        )
    step = str(rec.get("step", ""))
    n = int(step.removeprefix("change-")) if step.startswith("change-") else 0
    failed = roll_back_topology(rec)
    what = f"rolled back the {n} change{'s' if n != 1 else ''} it had made in {pin_dir}"
    if failed:
        return what + ", with errors: " + "; ".join(failed)
    return what + ": the state before it runs"


def _repair_topology_down(rec: dict) -> str:
    done = journal.take_down(str(rec["pin_dir"]), list(rec.get("hooks") or []))
    return f"finished taking {rec['pin_dir']} down" + (f" ({'; '.join(done)})" if done else "")


_REPAIRS = {
    "attach": _repair_attach,
    "detach": _repair_detach,
    "unload": _repair_unload,
    "load": _repair_load,
    journal.APPLY: _repair_topology_apply,
    journal.DOWN: _repair_topology_down,
}


def describe(rec: dict) -> str:
    """One line naming an intent record's operation: op, pid, where, the step reached."""
    where = [str(rec[k]) for k in ("pin_dir", "dev", "dir", "target") if rec.get(k)]
    at = f" on {', '.join(where)}" if where else ""
    return f"`{rec.get('op')}` of pid {rec.get('pid')}{at}, stopped after step {rec.get('step')}"


def pending() -> list[tuple[dict, bool]]:
    """(record, running) of every intent record, oldest first: ``running`` when one of
    its locks is held (its command is still at work), else what the next command that
    changes the system repairs.  Read only: takes no lock, changes nothing."""
    out = []
    for _path, rec in read_intents():
        names = [str(n) for n in rec.get("locks") or []]
        out.append((rec, any(is_held(n) for n in names)))
    return out


def repair_stale(locks: OpLocks) -> list[str]:
    """Repair every operation whose writer is gone (its locks can be taken now: the
    kernel released them when it died); returns one line per repair, saying what was
    done.  Records of running commands (their locks are held) are left alone."""
    out = []
    for path, rec in read_intents():
        if rec.get("pid") == os.getpid():
            continue
        names = [str(n) for n in rec.get("locks") or []]
        held = {k.name for k in locks.held}
        extra = [LockKey(n, n) for n in names if n not in held]
        if not locks.try_add(extra):
            continue  # its command is still running
        try:
            what = f"interrupted `{rec.get('op')}` of pid {rec.get('pid')}"
            fix = _REPAIRS.get(str(rec.get("op")))
            try:
                if fix is None:
                    msg = "unknown operation: record dropped"
                else:
                    with _in_netns_of(rec) as here:
                        if not here:
                            # its namespace is gone: nothing attached
                            rec = {**rec, "ifindex": 0, "netns_gone": True}
                        msg = fix(rec)
            except _Elsewhere:
                continue  # another namespace not named under /run/netns: repaired there
            except (DiagnosticError, OSError, LookupError, ValueError) as e:
                # never fail the command that repairs (a record missing a field included)
                out.append(f"bpfdsl: could not repair {what} (record {path} kept): {e}")
                continue
            os.unlink(path)
            out.append(f"bpfdsl: repaired {what}: {msg}")
        finally:
            locks.release(extra)
    return out


def staging_dirs(rec: dict) -> list[str]:
    """The staging dirs an intent record names: an attach's ``staging`` (one path) or a
    topology apply's (object name -> path); anything else names none (a record of another
    bpfdsl version is read, not trusted)."""
    st = rec.get("staging")
    if isinstance(st, str):
        return [st]
    if isinstance(st, dict):
        return [d for d in st.values() if isinstance(d, str)]
    return []


def orphan_staging(target: str) -> list[str]:
    """Remove ``TARGET_next_*`` staging dirs no intent record names (left by an older
    bpfdsl) that hold no live link; returns a line per dir removed."""
    named = {d for _p, rec in read_intents() for d in staging_dirs(rec)}
    out = []
    for d in sorted(glob.glob(glob.escape(target) + "_next_" + "[0-9a-f]" * 8)):
        if d in named or not os.path.isdir(d) or live_links_in(d):
            continue
        pins.remove_tree(d)
        out.append(f"bpfdsl: removed {d}, left by an interrupted attach (nothing attached from it)")
    return out
