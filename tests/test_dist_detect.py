"""Launch-mode detection from the environment, for every mode, without starting processes."""
import pytest

from utils.dist import (DistState, cuda_device_index, detect, expand_hostlist, first_host, select_gpus,
                        unused_gpu_notes)
from utils.errors import UserError

TORCHRUN = {'WORLD_SIZE': '4', 'RANK': '3', 'LOCAL_RANK': '1', 'MASTER_ADDR': '10.0.0.1', 'MASTER_PORT': '29500'}
SRUN = {'SLURM_JOB_ID': '4242', 'SLURM_STEP_ID': '0', 'SLURM_PROCID': '5', 'SLURM_LOCALID': '1',
        'SLURM_NTASKS': '8', 'SLURM_STEP_NUM_TASKS': '8', 'SLURM_STEP_NODELIST': 'gpu[07-08,11]',
        'SLURM_JOB_NODELIST': 'gpu[07-08,11]'}


def test_gpu_ids_on_a_machine_without_cuda_is_one_line_and_kairs_default_says_nothing():
    """`gpu_ids: [0, 1]` trained on the CPU without a word (a fuzz of malformed option files found it)."""
    single = DistState('single')
    assert unused_gpu_notes([0, 1], single, cuda=False) == [
        'gpu_ids: [0, 1] but CUDA sees no GPU on this machine: training on the CPU, in this one process']
    assert unused_gpu_notes([1], single, cuda=False) != []
    assert unused_gpu_notes([0], single, cuda=False) == []     # KAIR writes it in every file
    assert unused_gpu_notes(None, single, cuda=False) == []
    assert unused_gpu_notes([0, 1], single, cuda=True) == []
    assert unused_gpu_notes([0, 1], detect(TORCHRUN), cuda=False) == []  # a launcher's ranks ignore it by design


def test_a_run_with_gpu_ids_on_a_machine_without_cuda_logs_one_warning_line(tmp_path, demo_images, monkeypatch):
    import torch
    from conftest import clean_env, run_main, tiny_options, write_options
    # the run is in this process: on a machine with a GPU it sees none too (never a skip, which CI=true forbids)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    opt = tiny_options(str(tmp_path / 'exp'), demo_images, total_iter=1, checkpoint_test=1, checkpoint_save=1,
                       G_scheduler_milestones=[])
    opt.update(gpu_ids=[0, 1])
    opt['logging']['use_tensorboard'] = False
    res = run_main('main_train', ['--opt', write_options(str(tmp_path / 'o.json'), opt)],
                   env=clean_env(OMP_NUM_THREADS='1'))
    assert res.returncode == 0, res.stderr[-3000:]
    lines = [line for line in (res.stdout + res.stderr).splitlines() if ': gpu_ids' in line]
    assert len(lines) == 1 and 'WARNING: options: gpu_ids: [0, 1] but CUDA sees no GPU' in lines[0], lines


def test_plain_process_is_single_mode():
    assert detect({}) == DistState('single')
    assert not DistState('single').distributed


def test_torchrun_or_platform_env_is_used_as_given():
    s = detect(TORCHRUN)
    assert s == DistState('env', 4, 3, 1, '10.0.0.1', 29500)
    assert s.distributed


def test_debugger_style_world_size_1_still_uses_the_distributed_path():
    s = detect({'WORLD_SIZE': '1', 'RANK': '0', 'MASTER_ADDR': '127.0.0.1', 'MASTER_PORT': '1234'})
    assert s.mode == 'env' and s.world_size == 1 and s.local_rank == 0 and s.distributed


def test_env_mode_without_master_is_a_clear_error():
    with pytest.raises(UserError, match='WORLD_SIZE and RANK are set but MASTER_ADDR and MASTER_PORT are not'):
        detect({'WORLD_SIZE': '2', 'RANK': '0'})


def test_rank_outside_world_is_rejected():
    with pytest.raises(UserError, match='rank 4 is outside world size 4'):
        detect({**TORCHRUN, 'RANK': '4'})


def test_slurm_step_maps_procid_localid_and_step_tasks():
    s = detect(SRUN, scontrol='')
    assert (s.mode, s.world_size, s.rank, s.local_rank) == ('slurm', 8, 5, 1)
    assert s.master_addr == 'gpu07'
    assert s.master_port == 15000 + 4242 % 20000


def test_slurm_keeps_master_addr_and_port_exported_by_the_job_script():
    s = detect({**SRUN, 'MASTER_ADDR': 'head', 'MASTER_PORT': '12345'}, scontrol='')
    assert (s.master_addr, s.master_port) == ('head', 12345)


def test_sbatch_batch_script_itself_is_not_a_rank():
    batch_script = {k: v for k, v in SRUN.items() if k not in ('SLURM_STEP_ID', 'SLURM_STEP_NUM_TASKS',
                                                              'SLURM_STEP_NODELIST')}
    batch_script.update(SLURM_PROCID='0', SLURM_LOCALID='0')
    assert detect(batch_script) == DistState('single')


def test_torchrun_inside_a_slurm_step_wins_over_slurm_variables():
    s = detect({**SRUN, **TORCHRUN})
    assert s.mode == 'env' and s.rank == 3


def test_hostlist_expansion_without_scontrol():
    assert expand_hostlist('gpu[07-08,11],login1') == ['gpu07', 'gpu08', 'gpu11', 'login1']
    assert expand_hostlist('node1') == ['node1']
    assert expand_hostlist('a[1-2]b,c[009-010]') == ['a1b', 'a2b', 'c009', 'c010']
    assert first_host('n[3-4]', scontrol='') == 'n3'


def test_first_host_falls_back_when_scontrol_fails(tmp_path):
    fake = tmp_path / 'scontrol'
    fake.write_text('#!/bin/sh\nexit 1\n')
    fake.chmod(0o755)
    assert first_host('x[5-6]', scontrol=str(fake)) == 'x5'


def test_gpu_ids_set_visible_devices_only_for_a_single_process_and_only_when_unset():
    env = {}
    assert select_gpus([0, 2], DistState('single'), env) == '0,2' and env['CUDA_VISIBLE_DEVICES'] == '0,2'
    env = {'CUDA_VISIBLE_DEVICES': '3'}
    assert select_gpus([0], DistState('single'), env) is None and env['CUDA_VISIBLE_DEVICES'] == '3'
    env = {}
    assert select_gpus([0, 1], detect(TORCHRUN), env) is None and env == {}


@pytest.mark.parametrize('hostlist, hosts', [
    ('tux[0-3,7]', ['tux0', 'tux1', 'tux2', 'tux3', 'tux7']),          # SLURM's documented examples
    ('linux[00-03]', ['linux00', 'linux01', 'linux02', 'linux03']),
    ('rack[1-2]-node[01-02]', ['rack1-node01', 'rack1-node02', 'rack2-node01', 'rack2-node02']),
    ('gpu01,gpu[03-04],login', ['gpu01', 'gpu03', 'gpu04', 'login']),
    ('n[8-10]', ['n8', 'n9', 'n10']),
    ('cn-1.cluster.org', ['cn-1.cluster.org']),
])
def test_hostlists_with_any_number_of_bracket_groups_expand_in_slurm_order(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize('hostlist', ['a[3-1]', 'a[1-2', 'a]1', 'a[x-2]', 'a[1-]', 'a[]', 'a[²]', ''])
def test_a_malformed_hostlist_is_a_user_error_naming_it(hostlist):
    with pytest.raises(UserError, match='SLURM host list'):
        expand_hostlist(hostlist)


def test_first_host_of_a_multi_group_hostlist_without_scontrol():
    assert first_host('rack[1-2]-node[01-02]', scontrol='') == 'rack1-node01'


@pytest.mark.parametrize('local_rank, visible, index', [
    (0, 8, 0), (7, 8, 7),        # all of a node's GPUs visible: local rank i uses GPU i
    (3, 1, 0), (7, 1, 0),        # SLURM --gpus-per-task=1: each task sees its own GPU as index 0
    (9, 8, 1), (15, 8, 7),       # no LOCAL_RANK: the global rank wraps onto the node's GPUs
])
def test_the_cuda_device_is_picked_from_the_visible_gpus(local_rank, visible, index):
    assert cuda_device_index(local_rank, visible) == index


def test_no_visible_gpu_is_a_user_error():
    with pytest.raises(UserError, match='no GPU is visible'):
        cuda_device_index(0, 0)


def test_the_stop_agreement_group_under_nccl_gets_the_timeout_given_to_init(monkeypatch):
    """A dead node must not block the others for torch's 30-minute default."""
    import datetime

    import torch
    import torch.distributed

    from utils.dist import collectives, group
    created = []
    monkeypatch.setattr(group, '_timeout_s', group._timeout_s)  # restored after the test
    monkeypatch.setattr(group, '_control_group', None)
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    group.init(DistState('single'), timeout_s=42)
    monkeypatch.setattr(collectives, 'is_initialized', lambda: True)
    monkeypatch.setattr(torch.distributed, 'get_backend', lambda group=None: 'nccl')
    monkeypatch.setattr(torch.distributed, 'new_group', lambda **kw: created.append(kw) or 'group')
    monkeypatch.setattr(torch.distributed, 'all_reduce', lambda t, op=None, group=None: None)
    assert collectives.agree_any([False, True]) == [False, True]
    assert created == [{'backend': 'gloo', 'timeout': datetime.timedelta(seconds=42)}]


def test_all_reduce_sum_and_max_pass_their_op_and_return_the_tensor(monkeypatch):
    import torch
    import torch.distributed

    from utils.dist import collectives
    ops = []
    monkeypatch.setattr(collectives, 'is_initialized', lambda: True)
    monkeypatch.setattr(torch.distributed, 'get_backend', lambda group=None: 'gloo')
    monkeypatch.setattr(torch.distributed, 'all_reduce', lambda t, op=None, group=None: ops.append(op))
    t = torch.zeros(2)
    assert collectives.all_reduce_sum(t) is t and collectives.all_reduce_max(t) is t
    assert ops == [torch.distributed.ReduceOp.SUM, torch.distributed.ReduceOp.MAX]


def test_a_single_cpu_process_takes_one_thread_per_usable_core_shared_with_its_loader_workers(monkeypatch):
    """Every usable core (the demo's loader worker is idle 99 % of a step), the line saying how idle threads wait
    and who chose it, and denormals flushed on CPU (Adam's moments of dead weights decay through them)."""
    import os

    import torch

    from utils import wait_policy
    from utils.dist import set_cpu_threads
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2, 3, 4, 5})
    before = torch.get_num_threads()
    try:
        torch.set_flush_denormal(False)
        assert set_cpu_threads(DistState('single'), 2, {'OMP_WAIT_POLICY': 'PASSIVE'}) == (
            'CPU: 6 torch threads (one per usable core, shared with 2 loader workers; idle threads sleep at once '
            '(OMP_WAIT_POLICY=PASSIVE; as given); OMP_NUM_THREADS overrides)')
        assert torch.get_num_threads() == 6
        assert (torch.tensor([1e-39]) * 2).item() == 0  # a denormal is flushed to zero
        assert set_cpu_threads(DistState('single'), 0, {}) == (
            'CPU: 6 torch threads (one per usable core; idle threads spin for milliseconds, then sleep (GNU '
            'OpenMP\'s default: OMP_WAIT_POLICY unset); OMP_NUM_THREADS overrides)')
        env = {}
        wait_policy.choose(env, load=0.1)  # idle cores: a short spin
        assert env == {'GOMP_SPINCOUNT': str(wait_policy.SPIN_COUNT)}
        assert set_cpu_threads(DistState('single'), 1, env) == (
            f'CPU: 6 torch threads (one per usable core, shared with 1 loader worker; idle threads spin briefly, then '
            f'sleep (GOMP_SPINCOUNT={wait_policy.SPIN_COUNT}; set here: the usable cores were idle at start (0.1 of 6 '
            f'busy): small operations stay fast); OMP_NUM_THREADS overrides)')
        env = {}
        monkeypatch.setattr(wait_policy, 'WINDOW_S', float('inf'))  # the sample's figure, not this machine's load
        wait_policy.choose(env, load=1.5)  # cores other processes keep busy: sleep at once, and leave them theirs
        assert env == {'OMP_WAIT_POLICY': 'PASSIVE'}
        assert set_cpu_threads(DistState('single'), 0, env) == (
            'CPU: 4 torch threads (one per usable core left free: other processes kept 1.5 of the 6 busy through '
            'the start-up; idle threads sleep at once (OMP_WAIT_POLICY=PASSIVE; set here: other processes '
            'kept 1.5 of the 6 usable cores busy at start: spinning would take their time); OMP_NUM_THREADS '
            'overrides)')
        assert torch.get_num_threads() == 4
        assert set_cpu_threads(DistState('single'), 0, {'OMP_NUM_THREADS': '3'}) is None  # the user's choice
        assert set_cpu_threads(DistState('env', world_size=2, rank=0), 0, {}) is None  # DDP: init gives 1 each
    finally:
        torch.set_num_threads(before)
        torch.set_flush_denormal(False)


@pytest.mark.parametrize('given', [{'OMP_WAIT_POLICY': 'PASSIVE'}, {'GOMP_SPINCOUNT': '7'}, {'KMP_BLOCKTIME': '0'}])
def test_the_users_own_wait_policy_wins(given):
    from utils import wait_policy
    env = dict(given)
    wait_policy.choose(env, load=0.0)
    assert env == given and 'as given' in wait_policy.describe(env)


def test_a_choice_made_in_one_environment_is_not_claimed_for_another():
    """The thread line says "set here" only for the mapping `choose` wrote into, while it holds that value: a
    choice made earlier in the process (another test, an imported entry point) does not make a given setting ours."""
    from utils import wait_policy
    chosen = {}
    wait_policy.choose(chosen, load=0.0)
    assert 'set here' in wait_policy.describe(chosen)
    assert wait_policy.describe({'GOMP_SPINCOUNT': str(wait_policy.SPIN_COUNT)}).endswith('; as given)')
    chosen['GOMP_SPINCOUNT'] = '0'  # changed after the choice: no longer ours
    assert wait_policy.describe(chosen) == 'idle threads sleep at once (GOMP_SPINCOUNT=0; as given)'


@pytest.mark.parametrize('entry', ['main_train', 'main_test'])
def test_the_entry_points_choose_how_openmps_idle_threads_wait_before_torch_loads_unless_the_user_did(entry):
    """A short spin on idle cores (utils/wait_policy.py; the sampled load is pinned here), set before torch loads
    OpenMP, which reads it once; the user's OMP_WAIT_POLICY is left alone."""
    import subprocess
    import sys

    from tests.conftest import ROOT, clean_env
    from utils import wait_policy
    code = ('import os, sys\nfrom utils import wait_policy\nchoose = wait_policy.choose\n'
            'wait_policy.choose = lambda: (print("torch loaded:", "torch" in sys.modules), choose(load=0.0))\n'
            f'import {entry}\n'
            'print(os.environ.get("OMP_WAIT_POLICY"), os.environ.get("GOMP_SPINCOUNT"))')
    env = {k: v for k, v in clean_env().items() if k not in wait_policy.USER_KEYS}
    for given, expected in (({}, f'None {wait_policy.SPIN_COUNT}'), ({'OMP_WAIT_POLICY': 'ACTIVE'}, 'ACTIVE None')):
        out = subprocess.run([sys.executable, '-c', code], cwd=ROOT, env=dict(env, **given), capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.split('\n')[:2] == ['torch loaded: False', expected], (given, out.stdout)


def test_the_load_of_the_usable_cores_is_read_from_the_kernels_counters(tmp_path, monkeypatch):
    """Per core busy / total ticks between two readings, only over the cores this process may use."""
    from utils import cores, wait_policy
    stat = tmp_path / 'stat'
    stat.write_text('cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 0 0 0 100 0 0 0 0 0 0\ncpu1 50 0 0 50 0 0 0 0 0 0\n'
                    'intr 1 2 3\n')
    before = cores.cpu_times(str(stat))
    assert before == {0: (0, 100), 1: (50, 100)}
    after = {0: (100, 200), 1: (100, 200)}  # core 0 busy the whole time, core 1 half of it
    assert cores.busy_cores(before, after, frozenset({0, 1})) == 1.5
    assert cores.busy_cores(before, after, frozenset({1})) == 0.5
    assert cores.cpu_times(str(tmp_path / 'none')) == {}  # not Linux: no sample, a short spin
    env = {}
    monkeypatch.setattr(wait_policy, 'others_load', lambda mark: None)
    wait_policy.choose(env)
    assert env == {'GOMP_SPINCOUNT': str(wait_policy.SPIN_COUNT)} and 'load unknown' in wait_policy.describe(env)


def test_other_programs_load_since_a_mark_leaves_this_processs_own_cpu_time_out(monkeypatch):
    """Over the start-up this process itself keeps a core busy (torch's import): what is left is the others'."""
    import time

    from utils import cores
    monkeypatch.setattr(cores, 'affinity', lambda: frozenset({0, 1}))
    mark = cores.LoadMark(time.monotonic() - 2.0, {0: (0, 100), 1: (0, 100)}, time.process_time() - 1.0)
    monkeypatch.setattr(cores, 'cpu_times', lambda path=cores.STAT: {0: (100, 200), 1: (50, 200)})
    # 1.5 cores busy over 2 s, 1 s of it this process's: 1.0 core of others' (to the CPU this test itself takes)
    assert abs(cores.others_load_since(mark) - 1.0) < 0.05
    monkeypatch.setattr(cores, 'cpu_times', lambda path=cores.STAT: {})
    assert cores.others_load_since(mark) is None


def test_the_thread_count_follows_the_load_of_the_whole_start_up_not_only_the_first_sample(monkeypatch):
    """The sample before torch loads found the cores shared; what counts for the threads is how busy others kept them
    until the count is set (a neighbour that left during the start-up leaves every core to the run). Idle cores, a
    DDP rank or the user's OMP_NUM_THREADS or wait policy: no count from the load."""
    import os

    import torch

    from utils import wait_policy
    from utils.dist import set_cpu_threads
    monkeypatch.setattr(torch.cuda, 'is_available', lambda: False)
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1})
    monkeypatch.setattr(wait_policy, 'affinity', lambda: frozenset({0, 1}))
    before = torch.get_num_threads()
    try:
        env = {}
        wait_policy.choose(env, load=1.0)
        monkeypatch.setattr(wait_policy, 'WINDOW_S', 0.0)  # the start-up's own measure, however short
        for others, threads in ((0.2, 2), (0.6, 1), (1.0, 1), (1.9, 1)):
            monkeypatch.setattr(wait_policy, 'others_load_since', lambda mark: others)
            line = set_cpu_threads(DistState('single'), 1, env)
            assert torch.get_num_threads() == threads, (others, line)
            assert line.startswith(f'CPU: {threads} torch thread{"s" if threads > 1 else ""} (one per usable core')
            assert ('left free' in line) is (threads < 2)
            assert line.count('shared with 1 loader worker') == 1
        monkeypatch.setattr(wait_policy, 'others_load_since', lambda mark: 1.0)
        assert set_cpu_threads(DistState('single'), 0, dict(env, OMP_NUM_THREADS='2')) is None  # the user's count
        torch.set_num_threads(before)
        assert set_cpu_threads(DistState('env', world_size=2, rank=0), 0, env) is None  # DDP: init gives 1 each
        given = {'OMP_WAIT_POLICY': 'PASSIVE'}
        wait_policy.choose(given, load=1.0)  # the user's wait policy: nothing sampled, every core
        assert set_cpu_threads(DistState('single'), 0, given).startswith('CPU: 2 torch threads (one per usable core;')
        idle = {}
        wait_policy.choose(idle, load=0.1)
        assert set_cpu_threads(DistState('single'), 0, idle).startswith('CPU: 2 torch threads (one per usable core;')
    finally:
        torch.set_num_threads(before)
        torch.set_flush_denormal(False)
