"""SLURM for real: a one-node cluster on localhost (scripts/slurm_local.sh) runs the three ways users
launch on clusters: `sbatch submit_job.sh`, `srun -n 2` directly, and `srun` + torchrun per node.

The cluster needs root: scripts/slurm_local.sh starts its own munged, slurmctld and slurmd (private
state folder, socket and ports; stopped and removed after the tests). Where SLURM is not installed,
the tests install nothing unless asked to: as root,

    INSTALL_SLURM=1 python -m pytest -q tests/test_launch_slurm.py

lets scripts/slurm_local.sh `apt-get install slurmd slurmctld slurm-client munge` (Debian/Ubuntu),
and so does CI=true, where these tests must run. Otherwise they are skipped with a reason saying so.
"""
import glob
import os
import shutil
import subprocess
import sys
import time
import uuid
from typing import Callable, Dict, Iterator, Mapping, Optional, Tuple

import pytest

from tests.conftest import ROOT, clean_env, free_port, in_ci, run, tiny_options, write_options

# pytest-xdist keeps this module on one worker: one local SLURM cluster (and its install) for the session
pytestmark = pytest.mark.xdist_group('test_launch_slurm')

PY = sys.executable
SCRIPT = os.path.join(ROOT, 'scripts', 'slurm_local.sh')
JOB_DEADLINE_S = 240


SLURM_COMMANDS = ('slurmctld', 'slurmd', 'sbatch', 'srun', 'squeue', 'scontrol', 'munged')
HOW_TO_INSTALL = ('as root, INSTALL_SLURM=1 python -m pytest tests/test_launch_slurm.py lets scripts/slurm_local.sh '
                  'apt-get install slurmd slurmctld slurm-client munge (CI=true does too)')


def may_install(env: Mapping[str, str]) -> bool:
    """Whether the tests may install system packages: only when asked (INSTALL_SLURM=1) or in CI."""
    return in_ci(env) or env.get('INSTALL_SLURM') == '1'


def cannot_run_reason(env: Mapping[str, str] = os.environ, euid: Optional[int] = None,
                      which: Callable[[str], Optional[str]] = shutil.which) -> str:
    """Why the SLURM tests cannot run here ('' when they can), given the environment, user and PATH."""
    missing = [c for c in SLURM_COMMANDS if not which(c)]
    if (os.geteuid() if euid is None else euid) != 0:
        return 'not root: scripts/slurm_local.sh must run as root to start munged/slurmctld/slurmd'
    if not missing:
        return ''
    if not may_install(env):
        return f'SLURM is not installed ({", ".join(missing)} missing) and the tests install nothing unasked: {HOW_TO_INSTALL}'
    if not which('apt-get'):
        return 'apt-get is absent and SLURM is not installed: scripts/slurm_local.sh cannot install it'
    return ''


@pytest.fixture(scope='session')
def slurm() -> Iterator[Dict[str, str]]:
    """The environment for SLURM commands talking to a private cluster, stopped at the end."""
    reason = cannot_run_reason()
    if reason:
        if in_ci():
            pytest.fail(f'CI=true: the SLURM tests must run, but {reason}')
        pytest.skip(reason)
    env = {**os.environ, 'INSTALL_SLURM': '1' if may_install(os.environ) else '0'}
    res = subprocess.run(['bash', SCRIPT, 'start'], capture_output=True, text=True, timeout=300, env=env)
    if res.returncode != 0 or not res.stdout.strip():
        pytest.fail(f'scripts/slurm_local.sh start failed (exit {res.returncode}):\n{res.stderr[-3000:]}')
    conf = res.stdout.strip().splitlines()[-1]
    try:
        yield clean_env(SLURM_CONF=conf, PYTHON=PY)
    finally:
        stop = subprocess.run(['bash', SCRIPT, 'stop', conf], capture_output=True, text=True, timeout=120)
        assert stop.returncode == 0, stop.stderr
        shutil.rmtree(os.path.dirname(conf), ignore_errors=True)


def _wait_for_job(jid: str, env: Dict[str, str]) -> Tuple[str, str]:
    """Poll until the job leaves the queue, then read its final state (sbatch --wait lags ~30 s)."""
    deadline = time.monotonic() + JOB_DEADLINE_S
    while run(['squeue', '-h', '-j', jid], env=env, timeout=30).stdout.strip():
        if time.monotonic() > deadline:
            run(['scancel', jid], env=env, timeout=30)
            pytest.fail(f'job {jid} still queued or running after {JOB_DEADLINE_S} s (cancelled)')
        time.sleep(0.5)
    info = run(['scontrol', 'show', 'job', jid], env=env, timeout=30).stdout
    fields = dict(tok.split('=', 1) for tok in info.split() if '=' in tok)
    return fields.get('JobState', '?'), fields.get('ExitCode', '?')


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _assert_one_set_of_outputs(task_dir: str) -> None:
    assert len(glob.glob(os.path.join(task_dir, 'train_*.log'))) == 1
    assert len(glob.glob(os.path.join(task_dir, 'tb_logger', 'events.out.tfevents.*'))) == 1
    assert len(glob.glob(os.path.join(task_dir, 'options', '*.json'))) == 1
    assert {'8_G.pth', '8_state.pth'} <= set(os.listdir(os.path.join(task_dir, 'models')))


def test_sbatch_submit_job_trains_two_ranks_and_completes(slurm, tmp_path, demo_images):
    """The batch script itself is not a rank: srun inside it starts both, and rank 0 alone writes."""
    opt = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images))
    # The header asks for 8 GPUs; a CPU node has no gres, so the test overrides those lines.
    res = run(['sbatch', '--parsable', '--gres=none', '--nodes=1', '--ntasks-per-node=2', '--cpus-per-task=1',
               '--time=10', f'--output={tmp_path}/%x-%j.out', f'--error={tmp_path}/%x-%j.err',
               'submit_job.sh', opt], env=slurm, timeout=60)
    assert res.returncode == 0, res.stderr
    jid = res.stdout.strip().split(';')[0]
    state, exit_code = _wait_for_job(jid, slurm)
    out = _read(str(tmp_path / f'restoration-{jid}.out'))
    err = _read(str(tmp_path / f'restoration-{jid}.err'))
    assert (state, exit_code) == ('COMPLETED', '0:0'), out[-3000:] + err[-3000:]
    assert f'job {jid} (restart 0)' in out
    assert 'mode=slurm' in out and 'world_size=2' in out, out[-3000:]
    assert 'parameters identical on all 2 rank(s)' in out
    assert 'effective batch 8' in out  # 4 per process x 2 processes
    _assert_one_set_of_outputs(str(tmp_path / 'exp' / 'tiny'))


def test_srun_two_tasks_directly_train_together(slurm, tmp_path, demo_images):
    opt = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images))
    res = run(['srun', '-n', '2', '--cpus-per-task=1', '--time=5', '--kill-on-bad-exit=1',
               PY, '-u', 'main_train.py', '--opt', opt], env=slurm, timeout=JOB_DEADLINE_S)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'mode=slurm' in res.stdout and 'world_size=2' in res.stdout, res.stdout[-3000:]
    assert 'parameters identical on all 2 rank(s)' in res.stdout
    _assert_one_set_of_outputs(str(tmp_path / 'exp' / 'tiny'))


def test_srun_one_torchrun_per_node_with_c10d_rendezvous_trains_two_ranks(slurm, tmp_path, demo_images):
    """The per-node recipe: srun starts one torchrun per node, torchrun starts the ranks (env mode)."""
    opt = write_options(str(tmp_path / 'o.json'), tiny_options(str(tmp_path / 'exp'), demo_images))
    res = run(['srun', '-N1', '-n1', '--cpus-per-task=2', '--time=5', PY, '-m', 'torch.distributed.run',
               '--nnodes=1', '--nproc_per_node=2', '--rdzv_backend=c10d', f'--rdzv_id={uuid.uuid4().hex}',
               f'--rdzv_endpoint=127.0.0.1:{free_port()}', 'main_train.py', '--opt', opt],
              env=slurm, timeout=JOB_DEADLINE_S)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'mode=env' in res.stdout and 'world_size=2' in res.stdout, res.stdout[-3000:]
    assert 'parameters identical on all 2 rank(s)' in res.stdout
    _assert_one_set_of_outputs(str(tmp_path / 'exp' / 'tiny'))


@pytest.mark.parametrize('env, installs', [({}, False), ({'INSTALL_SLURM': '0'}, False), ({'CI': 'false'}, False),
                                           ({'INSTALL_SLURM': '1'}, True), ({'CI': 'true'}, True)],
                         ids=['plain', 'INSTALL_SLURM=0', 'CI=false', 'INSTALL_SLURM=1', 'CI=true'])
def test_a_missing_slurm_is_installed_only_when_asked_and_otherwise_the_tests_say_how_to_run_them(env, installs):
    """The README's test command as root must not apt-get anything by itself."""
    without_slurm = {'apt-get': '/usr/bin/apt-get'}.get
    reason = cannot_run_reason(env, euid=0, which=without_slurm)
    if installs:
        assert reason == ''
    else:
        assert reason.startswith('SLURM is not installed (slurmctld, slurmd, sbatch, srun, squeue, scontrol, munged '
                                 'missing) and the tests install nothing unasked: as root, INSTALL_SLURM=1 python -m '
                                 'pytest tests/test_launch_slurm.py lets scripts/slurm_local.sh apt-get install')
    installed = {c: f'/usr/sbin/{c}' for c in SLURM_COMMANDS}.get
    assert cannot_run_reason(env, euid=0, which=installed) == ''  # nothing to install: the cluster just starts
    assert cannot_run_reason(env, euid=1000, which=installed).startswith('not root')


@pytest.mark.parametrize('present', [(), ('munged',)], ids=['none', 'only-munged'])
def test_slurm_local_sh_never_runs_apt_get_without_install_slurm(tmp_path, present):
    """A missing command is one line and exit 1, even when some of them are there (munge without slurm)."""
    fake = tmp_path / 'bin'
    fake.mkdir()
    calls = tmp_path / 'apt-get-calls'
    for name in ('apt-get',) + present:
        (fake / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\n')
        (fake / name).chmod(0o755)
    (fake / 'id').write_text('#!/bin/sh\necho 0\n')  # root, as the README's test command may well be run
    (fake / 'id').chmod(0o755)
    env = {'PATH': str(fake), 'HOME': str(tmp_path)}  # nothing else: the script stops before it needs a tool
    res = subprocess.run(['/bin/bash', SCRIPT, 'start'], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and res.stdout == ''
    missing = ' '.join(c for c in SLURM_COMMANDS if c not in present)
    assert res.stderr == (f'slurm_local: not installed: {missing}; INSTALL_SLURM=1 lets this script apt-get install '
                          f'slurmd slurmctld slurm-client munge (as root)\n')
    assert not calls.exists()
