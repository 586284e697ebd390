#!/usr/bin/env python3
"""Build kubegpu's container image as a docker-archive, without a Docker daemon, reproducibly.

Why: the agent runs as a DaemonSet, so it needs an image; this host has no Docker engine and may only
download from package registries. The image is assembled from Debian bookworm packages (python3 and
the shared libraries it needs) and PyPI wheels (the agent's runtime dependencies, pinned in
requirements.txt beside this file, plus kubegpu's own wheel built from this checkout).

Steps:
1. Debian packages: ``mmdebstrap --variant=extract`` resolves and downloads ``python3-minimal``,
   ``libpython3.11-stdlib`` and ``libstdc++6`` with their dependencies into the cache (only when the
   cache does not hold that package set yet). The packages are *not* installed by dpkg: their data
   archives are read here (an ``ar`` archive holding ``data.tar.xz``) and merged into one root file
   system with a merged /usr (``bin``, ``sbin``, ``lib``, ``lib64`` are links into ``usr/``). dpkg and tar
   (pulled in only for maintainer scripts) are left out, and so are docs (except copyright files),
   man pages and locales.
2. Wheels: ``pip download --no-deps`` of requirements.txt for CPython 3.11 / manylinux x86_64 into the
   cache (offline first: a warm build asks no index), then ``pip install --no-deps --no-compile
   --target -r requirements.txt`` from the cache into /usr/lib/python3/dist-packages (exactly the pins:
   the cache is shared and may hold other checkouts' wheels); ``direct_url.json`` (it names a temporary
   path) is dropped.
3. One layer tar: entries sorted by path, every mtime = SOURCE_DATE_EPOCH (default: the time of the
   last commit), uid/gid 0, no user or group names, modes normalised (0755 executables and dirs,
   0644 files). Then a docker-archive (``docker save`` format: layer, config JSON, manifest.json)
   whose own entries are written the same way, so the same inputs give the same bytes and the same
   digest. The config's ``created`` is SOURCE_DATE_EPOCH too.
4. Before the archive is written, the root file system is checked by running ``kubegpu agent --help``
   in it (``chroot``, when run as root), and ``kubegpu.metrics.exporter`` and the extender's modules
   are imported (``--metrics-address`` and ``kubegpu extender`` load them lazily), so a missing library
   or wheel fails the build.

The image runs as user 65532 (``nonroot``) by default; the DaemonSet overrides that with
``runAsUser: 0`` because kubelet's device-plugin directory is root-owned 0750 (docs/deploy.md).

Usage: ``python3 deploy/image/build.py --out build/image/kubegpu.tar`` (``make image``);
``--check-reproducible`` builds twice into temporary files and fails unless both are byte-identical.
Cache: ``$KUBEGPU_IMAGE_CACHE`` (default ``~/.cache/kubegpu-image``), serialised by a lock file.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# busybox-static: the chart's pre-pull DaemonSet copies /bin/busybox into other images as a static `true`.
DEB_PACKAGES = ("python3-minimal", "libpython3.11-stdlib", "libstdc++6", "busybox-static")
DEB_EXCLUDE = frozenset({"dpkg", "tar"})  # only there for maintainer scripts, which never run here
PYTHON = "3.11"
PLATFORMS = (
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)
SITE = "usr/lib/python3/dist-packages"
NONROOT_UID = 65532
DEFAULT_TAG = "kubegpu.local/kubegpu:{version}"
MERGED_USR = ("bin", "sbin", "lib", "lib64")
DROP_PREFIXES = ("usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/")


class BuildError(RuntimeError):
    """The image cannot be built; the message says which step and why."""


def log(msg: str) -> None:
    print(f"[image {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-3000:]
        raise BuildError(f"command failed ({proc.returncode}): {' '.join(argv)}\n{tail}")
    return proc


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another image build holds {cache}/.lock; waiting for it")
            fcntl.flock(fh, fcntl.LOCK_EX)
        yield


# -- inputs -------------------------------------------------------------------------------------------


def fetch_debs(cache: Path) -> list[Path]:
    """The .deb files of DEB_PACKAGES and their dependencies, downloaded once per package set."""
    key = hashlib.sha256(" ".join((SUITE, MIRROR, *DEB_PACKAGES)).encode()).hexdigest()[:12]
    dest = cache / "debs" / f"{SUITE}-{key}"
    if not (dest / ".complete").exists():
        if shutil.which("mmdebstrap") is None:
            raise BuildError("mmdebstrap is missing: apt-get install mmdebstrap (Debian bookworm)")
        tmp = Path(tempfile.mkdtemp(prefix="debs.", dir=cache / "debs" if dest.parent.exists() else None))
        dest.parent.mkdir(parents=True, exist_ok=True)
        log(f"downloading Debian {SUITE} packages: {', '.join(DEB_PACKAGES)} and their dependencies")
        _run(
            [
                "mmdebstrap",
                "--mode=auto",
                "--variant=extract",
                "--quiet",
                f"--include={','.join(DEB_PACKAGES)}",
                "--skip=download/empty",
                "--skip=essential/unlink",
                '--setup-hook=mkdir -p "$1"/var/cache/apt/archives/',
                f"--extract-hook=sync-out /var/cache/apt/archives {tmp}",
                SUITE,
                "/dev/null",
                MIRROR,
            ]
        )
        shutil.rmtree(tmp / "partial", ignore_errors=True)
        (tmp / "lock").unlink(missing_ok=True)
        if not list(tmp.glob("*.deb")):
            raise BuildError("mmdebstrap downloaded no packages")
        (tmp / ".complete").write_text("\n".join(sorted(p.name for p in tmp.glob("*.deb"))) + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    return sorted(dest.glob("*.deb"))


def _pip_platform_args() -> list[str]:
    args = ["--only-binary=:all:", "--python-version", PYTHON, "--implementation", "cp"]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


def fetch_wheels(cache: Path, requirements: Path) -> Path:
    """The pinned wheels, in the cache; a warm cache needs no index."""
    dest = cache / "wheels"
    dest.mkdir(parents=True, exist_ok=True)
    base = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-r", str(requirements)]
    base += ["--dest", str(dest), *_pip_platform_args()]
    offline = subprocess.run(
        [*base, "--no-index", "--find-links", str(dest)], capture_output=True, text=True, check=False
    )
    if offline.returncode != 0:
        log("downloading wheels from PyPI (requirements.txt)")
        _run(base)
    return dest


def build_kubegpu_wheel(out: Path) -> Path:
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), str(REPO)])
    wheels = sorted(out.glob("kubegpu-*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"expected one kubegpu wheel in {out}, found {[w.name for w in wheels]}")
    return wheels[0]


# -- the root file system -----------------------------------------------------------------------------


@dataclass
class Entry:
    info: tarfile.TarInfo
    data: bytes | None = None


def _norm(name: str) -> str:
    name = name.removeprefix("./").removeprefix("/").rstrip("/")
    top, _, rest = name.partition("/")
    if top in MERGED_USR:
        return f"usr/{top}" + (f"/{rest}" if rest else "")
    return name


def _keep(name: str) -> bool:
    if name.startswith(DROP_PREFIXES) or name in {p.rstrip("/") for p in DROP_PREFIXES}:
        return False
    if name.startswith("usr/share/doc/"):
        parts = name.split("/")  # usr/share/doc/<package>[/copyright]
        return len(parts) == 4 or (len(parts) == 5 and parts[4] == "copyright")
    return True


def _deb_data(deb: Path) -> tuple[str, bytes]:
    """(package name, uncompressed data tar) of a .deb: an ar archive holding control and data tars."""
    raw = deb.read_bytes()
    if not raw.startswith(b"!<arch>\n"):
        raise BuildError(f"{deb.name}: not a Debian package (no ar header)")
    pos, members = 8, {}
    while pos + 60 <= len(raw):
        header = raw[pos : pos + 60]
        name = header[:16].decode().strip().rstrip("/")
        size = int(header[48:58].decode().strip())
        members[name] = raw[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size % 2)
    data_name = next((n for n in members if n.startswith("data.tar")), None)
    if data_name is None:
        raise BuildError(f"{deb.name}: no data.tar member")
    if data_name.endswith(".zst"):  # tarfile cannot read zstd; dpkg-deb can
        data = subprocess.run(
            ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
        ).stdout
    else:
        with tarfile.open(fileobj=io.BytesIO(members[data_name]), mode="r:*") as tin:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tout:
                for m in tin.getmembers():
                    tout.addfile(m, tin.extractfile(m) if m.isfile() else None)
            data = buf.getvalue()
    return deb.name.split("_", 1)[0], data


def _add_tree(entries: dict[str, Entry], tar_bytes: bytes) -> None:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as tin:
        for m in tin.getmembers():
            name = _norm(m.name)
            if not name or not _keep(name):
                continue
            info = tarfile.TarInfo(name)
            info.mode = m.mode
            if m.isdir():
                info.type = tarfile.DIRTYPE
                entries.setdefault(name, Entry(info))
                continue
            if m.issym():
                info.type, info.linkname = tarfile.SYMTYPE, m.linkname
                entries[name] = Entry(info)
            elif m.islnk():
                info.type, info.linkname = tarfile.LNKTYPE, _norm(m.linkname)
                entries[name] = Entry(info)
            elif m.isfile():
                f = tin.extractfile(m)
                assert f is not None
                entries[name] = Entry(info, f.read())


def _add_dir_tree(entries: dict[str, Entry], root: Path, prefix: str) -> None:
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        name = f"{prefix}/{rel}"
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        info = tarfile.TarInfo(name)
        if path.is_symlink():
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
            entries[name] = Entry(info)
        elif path.is_dir():
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            entries[name] = Entry(info)
        else:
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            entries[name] = Entry(info, path.read_bytes())


def _text(entries: dict[str, Entry], name: str, text: str, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    entries[name] = Entry(info, text.encode())


def _dir(entries: dict[str, Entry], name: str, mode: int = 0o755) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    entries[name] = Entry(info)


def assemble_rootfs(debs: list[Path], site: Path) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    for deb in debs:
        package, data = _deb_data(deb)
        if package in DEB_EXCLUDE:
            continue
        _add_tree(entries, data)
    for top in MERGED_USR:
        info = tarfile.TarInfo(top)
        info.type, info.linkname, info.mode = tarfile.SYMTYPE, f"usr/{top}", 0o777
        entries[top] = Entry(info)
        _dir(entries, f"usr/{top}")
    _add_dir_tree(entries, site, SITE)
    for d in ("etc", "proc", "sys", "dev", "run", "var", "var/run", "home", "home/nonroot", "root"):
        _dir(entries, d, 0o700 if d == "root" else 0o755)
    entries["home/nonroot"].info.uid = entries["home/nonroot"].info.gid = NONROOT_UID
    _dir(entries, "tmp", 0o1777)
    _text(
        entries,
        "etc/passwd",
        f"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{NONROOT_UID}:{NONROOT_UID}:nonroot:/home/nonroot:"
        "/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n",
    )
    _text(entries, "etc/group", f"root:x:0:\nnonroot:x:{NONROOT_UID}:\nnogroup:x:65534:\n")
    # every parent directory exists as an entry of its own
    for name in list(entries):
        parent = name.rpartition("/")[0]
        while parent and parent not in entries:
            _dir(entries, parent)
            parent = parent.rpartition("/")[0]
    return entries


def layer_tar(entries: dict[str, Entry], mtime: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(entries):
            entry = entries[name]
            info = entry.info
            info.mtime = mtime
            info.uname = info.gname = ""
            if info.isreg():
                info.mode = 0o755 if info.mode & 0o111 else 0o644
                assert entry.data is not None
                info.size = len(entry.data)
                tar.addfile(info, io.BytesIO(entry.data))
            else:
                if info.isdir() and info.mode not in (0o1777, 0o700):
                    info.mode = 0o755
                tar.addfile(info)
    return buf.getvalue()


def _archive_file(tar: tarfile.TarFile, name: str, data: bytes, mtime: int) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, mtime
    tar.addfile(info, io.BytesIO(data))


def docker_archive(*, tag: str, layer: bytes, mtime: int, version: str) -> tuple[bytes, str]:
    """(docker-archive bytes, image ID = sha256 of the config) for one image of one layer."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": f"{NONROOT_UID}:{NONROOT_UID}",
            "Entrypoint": ["/usr/bin/python3", "-m", "kubegpu"],
            "Cmd": ["agent"],
            "Env": [
                "PATH=/usr/local/bin:/usr/bin:/bin",
                "PYTHONDONTWRITEBYTECODE=1",
                "PYTHONUNBUFFERED=1",
                "LANG=C.UTF-8",
            ],
            "WorkingDir": "/",
            "Labels": {
                "org.opencontainers.image.title": "kubegpu",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.licenses": "Apache-2.0",
                "org.opencontainers.image.created": created,
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created, "created_by": "deploy/image/build.py"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(config_bytes).hexdigest()
    layer_dir = diff_id.removeprefix("sha256:")
    manifest = [{"Config": f"{image_id}.json", "RepoTags": [tag], "Layers": [f"{layer_dir}/layer.tar"]}]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        d = tarfile.TarInfo(layer_dir)
        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, mtime
        tar.addfile(d)
        _archive_file(tar, f"{layer_dir}/layer.tar", layer, mtime)
        _archive_file(tar, f"{image_id}.json", config_bytes, mtime)
        _archive_file(tar, "manifest.json", json.dumps(manifest, sort_keys=True).encode(), mtime)
    return buf.getvalue(), "sha256:" + image_id


def _smoke(entries: dict[str, Entry], work: Path) -> None:
    """Run ``kubegpu agent --help`` inside the root file system (needs root for chroot)."""
    if os.geteuid() != 0:
        log("not root: skipping the chroot check of the root file system")
        return
    root = work / "rootfs"
    with tarfile.open(fileobj=io.BytesIO(layer_tar(entries, 0)), mode="r:") as tar:
        tar.extractall(root, filter="fully_trusted")
    env = {"PATH": "/usr/bin", "PYTHONDONTWRITEBYTECODE": "1", "LANG": "C.UTF-8"}
    argv = [
        shutil.which("chroot") or "/usr/sbin/chroot",
        "--userspec",
        f"{NONROOT_UID}:{NONROOT_UID}",
        str(root),
    ]
    proc = subprocess.run(
        [*argv, "/usr/bin/python3", "-m", "kubegpu", "agent", "--help"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0 or "--node-spec" not in proc.stdout:
        raise BuildError(f"`kubegpu agent --help` fails inside the image:\n{proc.stderr.strip()[-3000:]}")
    # --metrics-address (on in the chart) imports prometheus-client only when used, and `kubegpu
    # extender` (the chart's extender.enabled) its modules and numpy only when run: import them here.
    imports = (
        "import kubegpu.metrics.exporter, kubegpu.extender.cluster, kubegpu.extender.server, "
        "kubegpu.sim.policy, kubegpu.extender.podpage, msgspec"
    )
    proc = subprocess.run(
        [*argv, "/usr/bin/python3", "-c", imports],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise BuildError(
            "the agent's metrics or the extender cannot be imported inside the image:\n"
            + proc.stderr.strip()[-3000:]
        )
    log("checked: `kubegpu agent --help` runs, the metrics and the extender import, as user 65532")
    # The pre-pull DaemonSet runs busybox, copied under the name `true`, inside other images.
    (root / "prepull").mkdir()
    true = root / "prepull/true"
    shutil.copyfile(root / "usr/bin/busybox", true)
    true.chmod(0o755)
    proc = subprocess.run([*argv, "/prepull/true"], capture_output=True, text=True, env=env, check=False)
    shutil.rmtree(root / "prepull")
    if proc.returncode != 0:
        raise BuildError(f"busybox copied as a static `true` fails inside the image: {proc.stderr.strip()}")
    log("checked: /bin/busybox runs as a static `true` (the chart's pre-pull DaemonSet)")


def _version() -> str:
    text = (REPO / "pyproject.toml").read_text()
    for line in text.splitlines():
        if line.startswith("version = "):
            return line.split("=", 1)[1].strip().strip('"')
    raise BuildError("no version in pyproject.toml")


def _prune_records(site: Path) -> None:
    """Drop RECORD lines of files removed above, so RECORD names exactly what the image holds."""
    for record in sorted(site.glob("*.dist-info/RECORD")):
        lines = record.read_text().splitlines()
        kept = [
            ln
            for ln in lines
            if (site / ln.split(",", 1)[0]).resolve().is_relative_to(site.resolve())
            and (site / ln.split(",", 1)[0]).exists()
        ]
        record.write_text("".join(f"{ln}\n" for ln in kept))


def _source_date_epoch() -> int:
    env = os.environ.get("SOURCE_DATE_EPOCH")
    if env:
        return int(env)
    proc = subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True, check=False
    )
    return int(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else 0


def build(out: Path, *, cache: Path, tag: str, mtime: int, smoke: bool = True) -> str:
    """Write the image to ``out``; returns its image ID."""
    t0 = time.monotonic()
    version = _version()
    with _locked(cache), tempfile.TemporaryDirectory(prefix="kubegpu-image.") as tmp:
        work = Path(tmp)
        debs = fetch_debs(cache)
        wheels = fetch_wheels(cache, HERE / "requirements.txt")
        own = build_kubegpu_wheel(work / "own")
        site = work / "site"
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--no-index"]
        pip += ["--target", str(site), *_pip_platform_args()]
        # Exactly the pinned wheels: the cache is shared with other checkouts and may hold more.
        _run([*pip, "--find-links", str(wheels), "-r", str(HERE / "requirements.txt"), str(own)])
        shutil.rmtree(site / "bin", ignore_errors=True)  # console scripts name the build's python
        for junk in (*site.glob("*.dist-info/direct_url.json"), *site.glob("*.dist-info/REQUESTED")):
            junk.unlink()  # direct_url.json names the temporary wheel path
        _prune_records(site)
        entries = assemble_rootfs(debs, site)
        if smoke:
            _smoke(entries, work)
        layer = layer_tar(entries, mtime)
        archive, image_id = docker_archive(tag=tag, layer=layer, mtime=mtime, version=version)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + f".tmp.{os.getpid()}")
    tmp_out.write_bytes(archive)
    tmp_out.rename(out)
    size_mb = sum(len(e.data or b"") for e in entries.values()) / 1e6
    log(
        f"wrote {out} ({len(archive) / 1e6:.1f} MB archive, {size_mb:.1f} MB unpacked, "
        f"{len(entries)} entries) "
        f"tag {tag} image ID {image_id} archive sha256:{hashlib.sha256(archive).hexdigest()} "
        f"in {time.monotonic() - t0:.1f} s"
    )
    return image_id


def _layer_index(archive: Path) -> dict[str, tuple[object, ...]]:
    with tarfile.open(archive) as outer:
        layer = next(m for m in outer.getmembers() if m.name.endswith("/layer.tar"))
        f = outer.extractfile(layer)
        assert f is not None
        with tarfile.open(fileobj=io.BytesIO(f.read())) as tar:
            out: dict[str, tuple[object, ...]] = {}
            for m in tar.getmembers():
                digest = hashlib.sha256(tar.extractfile(m).read()).hexdigest() if m.isfile() else ""  # type: ignore[union-attr]
                out[m.name] = (m.type, m.mode, m.uid, m.gid, m.mtime, m.linkname, digest)
            return out


def _differences(a: Path, b: Path) -> list[str]:
    """Which layer entries differ between two builds (for the reproducibility check's report)."""
    ia, ib = _layer_index(a), _layer_index(b)
    lines = [f"only in the first build: {n}" for n in sorted(set(ia) - set(ib))]
    lines += [f"only in the second build: {n}" for n in sorted(set(ib) - set(ia))]
    lines += [f"differs: {n} {ia[n]} != {ib[n]}" for n in sorted(set(ia) & set(ib)) if ia[n] != ib[n]]
    return lines or ["the layers are identical; the archive or config differs"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build/image/kubegpu.tar")
    parser.add_argument("--tag", default=None, help="RepoTag (default kubegpu.local/kubegpu:<version>)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("KUBEGPU_IMAGE_CACHE") or Path.home() / ".cache/kubegpu-image"),
    )
    parser.add_argument(
        "--check-reproducible", action="store_true", help="build twice; fail unless byte-identical"
    )
    args = parser.parse_args(argv)
    tag = args.tag or DEFAULT_TAG.format(version=_version())
    mtime = _source_date_epoch()
    try:
        if not args.check_reproducible:
            build(args.out, cache=args.cache, tag=tag, mtime=mtime)
            return 0
        with tempfile.TemporaryDirectory(prefix="kubegpu-repro.") as tmp:
            a, b = Path(tmp) / "a.tar", Path(tmp) / "b.tar"
            build(a, cache=args.cache, tag=tag, mtime=mtime)
            build(b, cache=args.cache, tag=tag, mtime=mtime, smoke=False)
            da, db = (hashlib.sha256(p.read_bytes()).hexdigest() for p in (a, b))
            if da != db:
                print(f"NOT reproducible: sha256 {da} != {db}", file=sys.stderr)
                for line in _differences(a, b)[:20]:
                    print(f"  {line}", file=sys.stderr)
                return 1
            print(f"reproducible: two builds are byte-identical, sha256:{da}")
            return 0
    except BuildError as exc:
        print(f"image build failed: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
