"""Launch-mode detection from the environment, for every mode, without starting processes."""
import pytest

from utils.dist import DistState, detect, expand_hostlist, first_host, select_gpus
from utils.errors import UserError

TORCHRUN = {'WORLD_SIZE': '4', 'RANK': '3', 'LOCAL_RANK': '1', 'MASTER_ADDR': '10.0.0.1', 'MASTER_PORT': '29500'}
SRUN = {'SLURM_JOB_ID': '4242', 'SLURM_STEP_ID': '0', 'SLURM_PROCID': '5', 'SLURM_LOCALID': '1',
        'SLURM_NTASKS': '8', 'SLURM_STEP_NUM_TASKS': '8', 'SLURM_STEP_NODELIST': 'gpu[07-08,11]',
        'SLURM_JOB_NODELIST': 'gpu[07-08,11]'}


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
