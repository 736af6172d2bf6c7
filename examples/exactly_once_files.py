"""Exactly-once file ingestion with a checkpoint: run, crash, restart, and check the output.

A pipeline reads an input directory (DirectorySource) and writes each batch to its own file
(FileSink), checkpointed. The first run is killed with SIGKILL after its first batch wrote its
output but before that batch was committed; the restart re-runs that batch (same time, same
files; the sink sees its file and skips it), takes the files that arrived meanwhile, and stops
by itself (AvailableNow). Every input line ends up in the output exactly once.

    python examples/exactly_once_files.py [--dir WORKDIR]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio

from streaming import DirectorySource, FileSink, Milliseconds, Pipeline, StreamingRuntime, Trigger


def write_input(directory: Path, number: int, lines: int) -> None:
    """Create an input file the way producers must: under a hidden name, then renamed into place."""
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f".{number:04d}.txt"
    temp.write_text("".join(f"file{number}-line{i}\n" for i in range(lines)))
    os.rename(temp, directory / f"{number:04d}.txt")


async def run(work: Path, trigger: Trigger) -> None:
    pipeline = Pipeline()
    pipeline.add_source(DirectorySource(work / "in"), name="in")
    pipeline.add_output(FileSink(work / "out"), name="files")
    async with StreamingRuntime(pipeline, Milliseconds(200), checkpoint_location=work / "checkpoint", trigger=trigger,
                                name="exactly-once-files") as rt:
        await rt.start()
        await rt.await_termination()
        for progress in rt.recent_progress:
            if progress.num_input_rows:
                how = ("re-run of a logged batch" if "walCommit" not in progress.duration_ms
                       else f"walCommit {progress.duration_ms['walCommit']} ms")
                print(f"  batch {progress.batch_id}: {progress.num_input_rows} lines ({how}, "
                      f"commitOffsets {progress.duration_ms['commitOffsets']} ms)")


def crash_after_first_output(work: Path) -> None:
    """The first run, in a child process that kills itself once the first batch's output is in place."""
    real_link = os.link
    out = work / "out"

    def link(src: str, dst: str) -> None:
        real_link(src, dst)
        if Path(dst).parent == out:
            os.kill(os.getpid(), signal.SIGKILL)  # output written, commit not yet

    os.link = link  # type: ignore[assignment]
    anyio.run(run, work, Trigger.PROCESSING_TIME)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", help="working directory (default: a new temporary one)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="exactly-once-"))
    if not args.child and work.exists() and (not work.is_dir() or any(work.iterdir())):
        parser.error(f"--dir {work} is not an empty directory: the example writes its input there and kills its first run, so it needs a "
                     "new or empty directory (a previous run's checkpoint would resume, and its first run never crash)")
    if args.child:
        crash_after_first_output(work)
        return
    for n in range(3):
        write_input(work / "in", n, lines=4)
    print(f"run 1 (working in {work}): killed after its first batch's output, before its commit")
    child = subprocess.run([sys.executable, __file__, "--dir", str(work), "--child"], check=False)
    print(f"  exit status {child.returncode} (SIGKILL is {-signal.SIGKILL})")
    for n in range(3, 5):
        write_input(work / "in", n, lines=4)
    print("run 2: same checkpoint, AvailableNow")
    anyio.run(run, work, Trigger.AVAILABLE_NOW)
    lines = [line for f in sorted((work / "out").glob("batch-*.txt")) for line in f.read_text().splitlines()]
    expected = sorted(f"file{n}-line{i}" for n in range(5) for i in range(4))
    verdict = "each exactly once" if sorted(lines) == expected else "NOT exactly once"
    print(f"output: {len(lines)} lines in {len(list((work / 'out').glob('batch-*.txt')))} files, {verdict}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:  # Ctrl-C: exit as the shell expects, quietly
        raise SystemExit(130) from None
