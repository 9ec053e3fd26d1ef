"""Memory checks see a job's memory cgroup, not only the machine: under SLURM `--mem`, Docker and Kubernetes
the kernel ends a job at its cgroup's limit, often far below the node's MemAvailable.

Every test builds a fake /proc/meminfo, /proc/self/cgroup and cgroup mount under tmp_path (`MemorySources`),
for cgroup v2 (memory.max, memory.current, memory.stat) and v1 (memory.limit_in_bytes, memory.usage_in_bytes,
memory.stat); the checks that refuse before allocating (the frame cache, the network-size check) are then
run under such a limit.
"""
import os
import threading
import time

import numpy as np
import pytest

from data import frame_cache
from utils import memory
from utils.errors import UserError
from utils.memory import MemoryBudget, MemorySources, available_memory, memory_budget

GiB = 2 ** 30
V1_NO_LIMIT = 9223372036854771712  # what cgroup v1 writes for "no limit"


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        f.write(text)


def _machine(tmp_path, available=20 * GiB, cgroup_lines=''):
    """A fake machine with `available` bytes of MemAvailable and these /proc/self/cgroup lines."""
    _write(tmp_path / 'meminfo', f'MemTotal:       32000000 kB\nMemFree:  1000 kB\n'
                                 f'MemAvailable:   {available // 1024} kB\n')
    _write(tmp_path / 'self_cgroup', cgroup_lines)
    os.makedirs(tmp_path / 'cgroup', exist_ok=True)
    return MemorySources(str(tmp_path / 'meminfo'), str(tmp_path / 'self_cgroup'), str(tmp_path / 'cgroup'))


def _v2(tmp_path, folder, limit, current, inactive=0):
    d = tmp_path / 'cgroup' / folder
    _write(d / 'memory.max', f'{limit}\n')
    _write(d / 'memory.current', f'{current}\n')
    _write(d / 'memory.stat', f'anon {current}\nfile 0\nactive_file 0\ninactive_file {inactive}\n')
    return str(d / 'memory.max')


def _v1(tmp_path, folder, limit, usage, inactive=0, hierarchical=V1_NO_LIMIT):
    d = tmp_path / 'cgroup' / 'memory' / folder
    _write(d / 'memory.limit_in_bytes', f'{limit}\n')
    _write(d / 'memory.usage_in_bytes', f'{usage}\n')
    _write(d / 'memory.stat', f'cache 0\nrss {usage}\nhierarchical_memory_limit {hierarchical}\n'
                              f'total_inactive_file {inactive}\n')
    return str(d / 'memory.limit_in_bytes')


def test_without_a_cgroup_limit_the_budget_is_memavailable(tmp_path):
    src = _machine(tmp_path, cgroup_lines='0::/user.slice\n')
    _v2(tmp_path, 'user.slice', 'max', 5 * GiB)
    assert memory_budget(src) == MemoryBudget(20 * GiB) and available_memory(src) == 20 * GiB
    assert memory_budget(src).has('1.00 GiB') == 'this machine has 1.00 GiB available'


def test_cgroup_v2_limit_less_the_working_set_bounds_the_budget(tmp_path):
    """A SLURM job of --mem=4G that holds 3 GiB, 1 GiB of it inactive page cache: 2 GiB left, not 20."""
    src = _machine(tmp_path, cgroup_lines='0::/system.slice/slurmstepd.scope/job_7/step_0\n')
    _v2(tmp_path, 'system.slice/slurmstepd.scope/job_7/step_0', 'max', 3 * GiB, inactive=GiB)
    job = _v2(tmp_path, 'system.slice/slurmstepd.scope/job_7', 4 * GiB, 3 * GiB, inactive=GiB)
    budget = memory_budget(src)
    assert budget == MemoryBudget(2 * GiB, 4 * GiB, job) and available_memory(src) == 2 * GiB
    assert budget.has('2.00 GiB') == f"this job's memory limit leaves 2.00 GiB (4.00 GiB in {job})"


def test_inside_a_container_the_cgroup_is_the_mounts_root(tmp_path):
    """Docker/Kubernetes with a cgroup namespace: /proc/self/cgroup says "0::/" (or names a host folder that
    is not mounted here) and the limit is /sys/fs/cgroup/memory.max itself."""
    for line in ('0::/\n', '0::/kubepods/burstable/pod1/abc\n'):
        src = _machine(tmp_path, cgroup_lines=line)
        root = _v2(tmp_path, '', 512 * 2 ** 20, 100 * 2 ** 20)
        assert memory_budget(src) == MemoryBudget(412 * 2 ** 20, 512 * 2 ** 20, root), line


def test_cgroup_v1_limit_usage_and_the_hierarchical_limit_of_hidden_ancestors(tmp_path):
    src = _machine(tmp_path, cgroup_lines='12:pids:/docker/c1\n4:memory:/docker/c1\n0::/\n')
    own = _v1(tmp_path, 'docker/c1', 6 * GiB, 2 * GiB, inactive=GiB // 2)
    _v1(tmp_path, 'docker', V1_NO_LIMIT, 2 * GiB)
    assert memory_budget(src) == MemoryBudget(6 * GiB - 3 * GiB // 2, 6 * GiB, own)
    # an ancestor outside the container's view limits it to 3 GiB: memory.stat says so
    _v1(tmp_path, 'docker/c1', V1_NO_LIMIT, 2 * GiB, hierarchical=3 * GiB)
    stat = str(tmp_path / 'cgroup' / 'memory' / 'docker' / 'c1' / 'memory.stat')
    assert memory_budget(src) == MemoryBudget(GiB, 3 * GiB, f'{stat} (hierarchical_memory_limit)')


def test_v1_no_limit_and_unreadable_files_fall_back_to_the_machine_and_nothing_readable_is_none(tmp_path):
    src = _machine(tmp_path, cgroup_lines='4:memory:/\n')
    _v1(tmp_path, '', V1_NO_LIMIT, 2 * GiB)
    assert memory_budget(src) == MemoryBudget(20 * GiB)
    src = _machine(tmp_path, cgroup_lines='garbage\n0::/missing\n')
    assert memory_budget(src) == MemoryBudget(20 * GiB)
    nothing = MemorySources(str(tmp_path / 'no'), str(tmp_path / 'no'), str(tmp_path / 'no'))
    assert memory_budget(nothing) is None and available_memory(nothing) is None


def test_a_limit_below_what_the_cgroup_uses_leaves_nothing(tmp_path):
    src = _machine(tmp_path, cgroup_lines='0::/\n')
    _v2(tmp_path, '', GiB, 2 * GiB)
    assert memory_budget(src).available == 0


@pytest.fixture
def job_of_64_mib(tmp_path, monkeypatch):
    """This process inside a cgroup v2 job limited to 64 MiB of which 60 MiB are used, on a machine with
    20 GiB available."""
    src = _machine(tmp_path / 'fake', cgroup_lines='0::/job\n')
    limit = _v2(tmp_path / 'fake', 'job', 64 * 2 ** 20, 60 * 2 ** 20)
    monkeypatch.setattr(memory, 'SOURCES', src)
    return limit


def test_the_frame_cache_is_refused_under_the_jobs_limit_naming_it(tmp_path, job_of_64_mib):
    from conftest import unchecked_section
    from data.datasets.image import DatasetDnCNN
    from utils.image import imwrite
    os.makedirs(tmp_path / 'H')
    for i in range(3):
        imwrite(str(tmp_path / 'H' / f'{i}.png'), np.zeros((1100, 1100, 3), np.uint8))  # 3.5 MiB each, decoded
    with pytest.raises(UserError, match=r"^datasets\.train: the decoded frames need 0\.01 GiB but this job's memory "
                                        r"limit leaves 0\.00 GiB \(0\.06 GiB in .*/job/memory\.max\); set cache_data "
                                        r"to false"):
        DatasetDnCNN(unchecked_section(DatasetDnCNN, 'train', dataroot_H=str(tmp_path / 'H'), H_size=24,
                                       cache_data=True))


def test_the_network_size_check_uses_the_jobs_limit(job_of_64_mib):
    from models.network_loading import build_checked_network
    netG = {'net_type': 'dncnn', 'in_nc': 3, 'out_nc': 3, 'nc': 512, 'nb': 20, 'act_mode': 'R'}  # 0.17 GB of weights
    with pytest.raises(UserError, match=r"^netG \(dncnn\): [\d,]+ parameters, 0\.2 GB of float32 weights alone, "
                                        r"more than this job's memory limit leaves 0\.0 GB \(0\.06 GiB in "
                                        r".*/job/memory\.max\)"):
        build_checked_network(netG, 'netG')


def _fill(paths, read, threads):
    shapes = {p: (2, 3, 1) for p in paths}
    return frame_cache.FrameCache(shapes, read, 'datasets.train', threads=threads)


def test_a_fill_decodes_with_several_threads_into_the_same_buffer():
    names = set()

    def read(path):
        names.add(threading.current_thread().name)
        time.sleep(0.02)  # a decode long enough that the other threads take up the next frames
        return np.full((2, 3, 1), int(path), np.uint8)
    paths = [str(i) for i in range(16)]
    one, four = _fill(paths, read, 1), _fill(paths, read, 4)
    np.testing.assert_array_equal(one.buffer, np.repeat(np.arange(16, dtype=np.uint8), 6))
    np.testing.assert_array_equal(one.buffer, four.buffer)
    assert len({n for n in names if n.startswith('frame_cache')}) > 1


def test_a_parallel_fill_reports_the_first_bad_frame_in_index_order():
    """Frame 3 fails at once, frame 1 later: frame 1's line, as a fill one frame after the other gives."""
    def read(path):
        if path == '1':
            time.sleep(0.2)
            raise UserError(f'cannot decode image {path}')
        if path == '3':
            raise UserError(f'cannot decode image {path}')
        return np.zeros((2, 3, 1), np.uint8)
    for threads in (1, 4):
        with pytest.raises(UserError, match=r'^datasets\.train: cannot decode image 1$'):
            _fill([str(i) for i in range(8)], read, threads)


def test_fill_threads_follow_the_processors_this_process_may_use(monkeypatch):
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2})
    assert frame_cache.fill_threads() == 3
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: set(range(128)))
    assert frame_cache.fill_threads() == frame_cache.MAX_FILL_THREADS
    monkeypatch.setattr(frame_cache, 'FILL_THREADS', 1)
    assert frame_cache.fill_threads() == 1


def test_usable_cores_are_the_affinity_mask_else_the_machines_count(monkeypatch):
    """utils.cores, which sizes torch's threads, cache fills, script and test workers: a process pinned to 3
    cores of a 64-core node uses 3; where the platform has no affinity, the machine's count, at least 1."""
    from utils.cores import usable_cores
    monkeypatch.setattr(os, 'cpu_count', lambda: 64)
    monkeypatch.setattr(os, 'sched_getaffinity', lambda pid: {0, 1, 2})
    assert usable_cores() == 3
    monkeypatch.delattr(os, 'sched_getaffinity')
    assert usable_cores() == 64
    monkeypatch.setattr(os, 'cpu_count', lambda: None)
    assert usable_cores() == 1
