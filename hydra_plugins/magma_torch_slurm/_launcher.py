"""hydra-submitit-launcher's Slurm launcher, with a refused submission reported as one line.

Used by ``hydra/launcher=slurm`` and ``slurm_local`` (conf/hydra/launcher/); Hydra loads
launchers only from the ``hydra_plugins`` namespace, hence this package. The stock
launcher lets sbatch's refusal (bad partition, too many resources), or its absence, surface
as a traceback; here it ends the run with ``magma-run: error: ...`` and exit status 1.
"""
from __future__ import annotations

import shutil
import sys

from hydra_plugins.hydra_submitit_launcher.submitit_launcher import SlurmLauncher as SubmititSlurmLauncher


class SlurmLauncher(SubmititSlurmLauncher):
    def launch(self, job_overrides, initial_job_idx):
        from submitit.core.utils import FailedJobError   # lazy, as in the stock launcher: plugin discovery stays fast

        if shutil.which("sbatch") is None:
            _fail("no Slurm here: sbatch is not on PATH (a local cluster for tests: make slurm-local)")
        try:
            return super().launch(job_overrides, initial_job_idx)
        except FailedJobError as err:
            message = " ".join(str(err).split())
            if message and not message.startswith("sbatch"):   # a job that ran and failed keeps its trace
                raise
            _fail(f"Slurm refused the submission: {message or 'sbatch failed and said nothing'}")


def _fail(message: str) -> None:
    # SystemExit passes through Hydra's error report, which would print a traceback
    print(f"magma-run: error: {message}", file=sys.stderr)
    sys.exit(1)
