"""A shell's pipeline, ``job | logger``, for the containment tests.

    python -m tests.keeper.pipeline_launcher STAMPS JOB_ARGS...

As a shell with job control starts a pipeline: the job
(``contained_job.py JOB_ARGS``) leads a process group of its own, and a
sibling it did not start (here a stamper, ``sibling``) is put in that group
by this launcher, its parent. The job shares our stdin and stdout. Prints
``sibling PID`` and, once the job has ended, ``job-exit STATUS``; ends the
sibling when its own stdin closes."""

from __future__ import annotations

import subprocess
import sys

from tests.keeper.contained_job import STAMP


def main() -> None:
    stamps, job_args = sys.argv[1], sys.argv[2:]
    job = subprocess.Popen([sys.executable, "-m", "tests.keeper.contained_job", *job_args],
                           process_group=0)
    sibling = subprocess.Popen([sys.executable, "-c", STAMP, stamps, "sibling"],
                               process_group=job.pid, stdin=subprocess.DEVNULL)
    print("sibling", sibling.pid, flush=True)
    print("job-exit", job.wait(), flush=True)
    sys.stdin.read()
    sibling.kill()
    sibling.wait()


if __name__ == "__main__":
    main()
