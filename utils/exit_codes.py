"""Every exit code of the project's commands, in one place: a job script acts on them (docs/faults.md).

main_train.py, main_test.py, scripts/export.py, scripts/launch.py and the ranks' watchdogs all end with
one of these, so a job script can tell "requeue me" (3) from "broken" (anything else) whichever
command it ran. The launcher passes on the code of the rank that failed first, named by `MEANING`.
"""
import signal

EXIT_USER_ERROR = 2  # a user mistake, one line on stderr, nothing written; or unreadable data mid-run
EXIT_PREEMPTED = 3  # stopped on request (SIGTERM/SIGUSR1), checkpoint saved: requeue
EXIT_NONFINITE = 4  # non-finite loss, gradients or weights (train.nan_policy)
EXIT_SAVE_FAILED = 5  # a checkpoint or another write to the run folder failed
EXIT_WRITE_FAILED = EXIT_SAVE_FAILED  # main_test's results or an export could not be written: the same code
EXIT_OUT_OF_MEMORY = 6  # a CUDA out-of-memory error (training step, validation, main_test): no checkpoint written after it
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130: Ctrl-C, what a shell reports for it; a person asked, nothing requeues
# 143: a rank whose launcher died and that did not stop in time (utils/parent_watch.py); 128 + SIGTERM, what a
# shell reports for a process ended by SIGTERM; not 3, which promises a checkpoint
EXIT_ORPHANED = 128 + signal.SIGTERM

MEANING = {EXIT_USER_ERROR: 'user error', EXIT_PREEMPTED: 'stopped for preemption, checkpoint saved',
           EXIT_NONFINITE: 'non-finite loss or gradients',
           EXIT_SAVE_FAILED: 'checkpoint write failed (or another write to the run folder)',
           EXIT_OUT_OF_MEMORY: 'out of memory',
           EXIT_INTERRUPTED: 'interrupted by SIGINT (Ctrl-C)'}
