"""Where this process sits in the run, worked out from the environment alone.

Detection is a pure function of the environment so that every launch mode can be tested with a
patched dict: torchrun or a platform that injects WORLD_SIZE/RANK/MASTER_* ('env'), a SLURM job
step ('slurm'), or a plain process ('single'). The sbatch batch script also carries SLURM_PROCID,
so SLURM is recognised only inside a job step (SLURM_STEP_ID set); otherwise the batch script
would wait forever for ranks that never come. Nothing here starts a process group.
"""
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence

from utils.errors import UserError


@dataclass(frozen=True)
class DistState:
    """The launch as detected once at start; passed around instead of re-reading the environment."""

    mode: str                 # 'single' | 'env' | 'slurm'
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    master_addr: Optional[str] = None
    master_port: Optional[int] = None

    @property
    def distributed(self) -> bool:
        """True when a process group is used (also for WORLD_SIZE=1 launched by a tool)."""
        return self.mode != 'single'


def _split_top(text: str, where: str) -> List[str]:
    """Split at commas outside brackets: `a[1,3],b` -> ['a[1,3]', 'b']."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == '[':
            depth += 1
            if depth > 1:
                raise UserError(f'SLURM host list {where!r}: nested "["')
        elif c == ']':
            depth -= 1
            if depth < 0:
                raise UserError(f'SLURM host list {where!r}: "]" without "["')
        elif c == ',' and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise UserError(f'SLURM host list {where!r}: "[" without "]"')
    parts.append(text[start:])
    return [p for p in parts if p]


_DIGITS = re.compile(r'[0-9]+')  # ASCII only: str.isdigit() also accepts '²', which int() rejects


def _bracket_values(spec: str, where: str) -> List[str]:
    """`01-03,07` -> ['01', '02', '03', '07'] (zero padding of the lower bound kept)."""
    values = []
    for part in spec.split(','):
        lo, dash, hi = part.partition('-')
        if not _DIGITS.fullmatch(lo) or (dash and not _DIGITS.fullmatch(hi)):
            raise UserError(f'SLURM host list {where!r}: bad range "{part}"')
        hi = hi if dash else lo
        if int(hi) < int(lo):
            raise UserError(f'SLURM host list {where!r}: empty range "{part}"')
        values.extend(str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1))
    return values


# A literal then an optional bracket group; `spec` is None when there is no group, '' for `[]`.
_GROUPS = re.compile(r'([^\[]*)(?:\[([^\]]*)\])?')


def expand_hostlist(hostlist: str) -> List[str]:
    """Expand a SLURM host list without `scontrol` (pure Python), in SLURM's order.

    `gpu[01-03,07],login1` -> gpu01 gpu02 gpu03 gpu07 login1; a host may have several bracket
    groups: `rack[1-2]-node[01-02]` -> rack1-node01 rack1-node02 rack2-node01 rack2-node02.
    """
    hosts: List[str] = []
    for host in _split_top(hostlist.strip(), hostlist):
        names = ['']
        for m in _GROUPS.finditer(host):
            literal, spec = m.group(1), m.group(2)
            values = _bracket_values(spec, hostlist) if spec is not None else ['']
            names = [n + literal + v for n in names for v in values]
        hosts.extend(names)
    if not hosts:
        raise UserError(f'SLURM host list {hostlist!r} names no host')
    return hosts


def first_host(hostlist: str, scontrol: Optional[str] = None) -> str:
    """First host of a SLURM node list: `scontrol show hostnames` when present, else pure Python."""
    scontrol = scontrol if scontrol is not None else shutil.which('scontrol')
    if scontrol:
        try:
            out = subprocess.run([scontrol, 'show', 'hostnames', hostlist], capture_output=True,
                                 text=True, timeout=20, check=True).stdout.split()
            if out:
                return out[0]
        except (OSError, subprocess.SubprocessError):
            pass
    return expand_hostlist(hostlist)[0]


def _int(env: Mapping[str, str], key: str) -> int:
    try:
        return int(env[key])
    except ValueError:
        raise UserError(f'environment: {key}={env[key]!r} is not an integer') from None


def detect(env: Mapping[str, str] = os.environ, scontrol: Optional[str] = None) -> DistState:
    """Work out the launch mode and this process's place in it from `env`.

    In env mode without LOCAL_RANK (some platforms set only WORLD_SIZE/RANK), the global RANK is
    taken as the local rank; `cuda_device_index` then maps it onto the GPUs this process can see.
    """
    if 'WORLD_SIZE' in env and 'RANK' in env:
        missing = [k for k in ('MASTER_ADDR', 'MASTER_PORT') if not env.get(k)]
        if missing:
            raise UserError(f'environment: WORLD_SIZE and RANK are set but {" and ".join(missing)} '
                            f'{"is" if len(missing) == 1 else "are"} not')
        state = DistState('env', _int(env, 'WORLD_SIZE'), _int(env, 'RANK'),
                          _int(env, 'LOCAL_RANK') if 'LOCAL_RANK' in env else _int(env, 'RANK'),
                          env['MASTER_ADDR'], _int(env, 'MASTER_PORT'))
    elif 'SLURM_STEP_ID' in env and 'SLURM_PROCID' in env:
        world = env.get('SLURM_STEP_NUM_TASKS') or env.get('SLURM_NTASKS') or '1'
        nodes = env.get('SLURM_STEP_NODELIST') or env.get('SLURM_JOB_NODELIST') or '127.0.0.1'
        addr = env.get('MASTER_ADDR') or first_host(nodes, scontrol)
        if env.get('MASTER_PORT'):
            port = _int(env, 'MASTER_PORT')
        else:  # same on every task of the job, different between jobs sharing a node
            port = 15000 + int(re.sub(r'\D', '', env.get('SLURM_JOB_ID', '0')) or 0) % 20000
        state = DistState('slurm', int(world), _int(env, 'SLURM_PROCID'),
                          _int(env, 'SLURM_LOCALID') if 'SLURM_LOCALID' in env else 0, addr, port)
    else:
        return DistState('single')
    if not 0 <= state.rank < state.world_size:
        raise UserError(f'environment: rank {state.rank} is outside world size {state.world_size}')
    return state


def select_gpus(gpu_ids: Optional[Sequence[int]], state: DistState, env: Any = os.environ) -> Optional[str]:
    """Single-process runs may restrict visible GPUs with `gpu_ids`; never on clusters or under DDP.

    Returns the value set, or None when left alone (launcher/cluster owns CUDA_VISIBLE_DEVICES).
    """
    if state.distributed or not gpu_ids or 'CUDA_VISIBLE_DEVICES' in env:
        return None
    env['CUDA_VISIBLE_DEVICES'] = ','.join(str(g) for g in gpu_ids)
    return env['CUDA_VISIBLE_DEVICES']


def unused_gpu_notes(gpu_ids: Optional[Sequence[int]], state: DistState, cuda: bool) -> List[str]:
    """One line when a plain start names GPUs (`gpu_ids`) on a machine where CUDA sees none: the run then trains
    on the CPU in one process, which `gpu_ids: [0, 1]` does not say. KAIR's `[0]`, in every one of its files, stays
    silent; under a launcher or a cluster `gpu_ids` is ignored by design (its help says so)."""
    if cuda or state.distributed or not gpu_ids or list(gpu_ids) == [0]:
        return []
    return [f'gpu_ids: {list(gpu_ids)} but CUDA sees no GPU on this machine: training on the CPU, in this one '
            f'process']


def cuda_device_index(local_rank: int, visible: int) -> int:
    """This rank's GPU among the `visible` ones: local rank modulo what this process can see.

    With one GPU per task (SLURM `--gpus-per-task=1`, or a launcher that sets CUDA_VISIBLE_DEVICES
    per rank) every rank uses index 0 whatever its local rank; with all of a node's GPUs visible,
    local rank i uses GPU i. A launch without LOCAL_RANK falls back to the global rank (see
    `detect`), which the modulo maps onto the node's GPUs when ranks are numbered node by node.
    """
    if visible < 1:
        raise UserError('CUDA is available but no GPU is visible (check CUDA_VISIBLE_DEVICES)')
    return local_rank % visible
