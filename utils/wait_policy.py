"""How torch's idle OpenMP threads wait for their next parallel region: chosen by the entry points before torch
loads OpenMP, which reads the setting once, and stated in the run's thread line (`describe`).

torch's CPU builds run their intra-op threads on GNU OpenMP. A thread that has finished its share of a parallel
region spins for GOMP_SPINCOUNT iterations before it sleeps: 300,000 by default (milliseconds), none with
OMP_WAIT_POLICY=PASSIVE. Neither end suits every machine:
- on idle cores, sleeping at once makes every parallel region pay a wake-up, which networks made of many small
  operations (channel attention: pooling to 1x1, 1x1 convolutions, sigmoids) cannot hide; a short spin catches
  the next region when it follows closely, as the operations of one forward or backward pass do;
- on cores that other programs keep busy, any spin takes time slices from them and from this run's own
  threads; sleeping at once is the fastest there.
So the choice is made from the cores themselves: their load over a short sample before torch starts (this
process sleeps through it, so what is measured is the others'). Idle: SPIN_COUNT; shared (at least
SHARED_CORES of other programs' load): PASSIVE. The figures behind both are in docs/launching.md ("Devices and
CPU threads"). A neighbour that starts later meets a short spin, which gives its core up soon.

The user's own OMP_WAIT_POLICY, GOMP_SPINCOUNT or KMP_BLOCKTIME wins, unsampled.
"""
import os
import time
from typing import Dict, FrozenSet, MutableMapping, Optional, Tuple

from utils.cores import affinity

SPIN_ENV = 'GOMP_SPINCOUNT'
POLICY_ENV = 'OMP_WAIT_POLICY'
USER_KEYS = (POLICY_ENV, SPIN_ENV, 'KMP_BLOCKTIME')
SPIN_COUNT = 10000  # iterations of GNU OpenMP's spin loop (its default: 300,000)
SHARED_CORES = 0.5  # other programs' load on this process's cores, in cores, above which idle threads sleep at once
SAMPLE_S = 0.1
STAT = '/proc/stat'

# What `choose` last set, in which mapping and why (None: it set nothing). `describe` claims the choice only for
# that mapping while it still holds that value: another mapping's setting is the user's.
_chosen: Optional[Tuple[MutableMapping[str, str], str, str, str]] = None


def cpu_times(path: str = STAT) -> Dict[int, Tuple[int, int]]:
    """Per core: (busy, total) clock ticks since boot, from the kernel's counters ({} where there are none)."""
    times: Dict[int, Tuple[int, int]] = {}
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError:
        return times
    for line in lines:
        name, *fields = line.split()
        if name.startswith('cpu') and name[3:].isdigit() and len(fields) >= 8:
            user, nice, system, idle, iowait, irq, softirq, steal = map(int, fields[:8])
            busy = user + nice + system + irq + softirq + steal
            times[int(name[3:])] = (busy, busy + idle + iowait)
    return times


def busy_cores(before: Dict[int, Tuple[int, int]], after: Dict[int, Tuple[int, int]], cores: FrozenSet[int]) -> float:
    """How many of `cores`' worth of time was busy between two `cpu_times` readings."""
    load = 0.0
    for core in cores & before.keys() & after.keys():
        busy, total = after[core][0] - before[core][0], after[core][1] - before[core][1]
        load += busy / total if total > 0 else 0.0
    return load


def others_load(sample_s: float = SAMPLE_S) -> Optional[float]:
    """Other programs' load on this process's cores over `sample_s` (in cores), or None where it cannot be read."""
    before = cpu_times()
    if not before:
        return None
    time.sleep(sample_s)
    return busy_cores(before, cpu_times(), affinity())


def choose(env: MutableMapping[str, str] = os.environ, load: Optional[float] = None) -> None:
    """Set how idle threads wait unless the user did: a short spin on idle cores, none on shared ones. Call
    before `import torch`. `load`: other programs' load in cores (None: sampled now)."""
    global _chosen
    _chosen = None
    if any(k in env for k in USER_KEYS):
        return
    load = others_load() if load is None else load
    cores = len(affinity())
    if load is not None and load >= SHARED_CORES:
        env[POLICY_ENV] = 'PASSIVE'
        _chosen = (env, POLICY_ENV, 'PASSIVE',
                   f'other processes kept {load:.1f} of the {cores} usable core{"s" if cores > 1 else ""} busy at '
                   f'start: spinning would take their time')
    else:
        env[SPIN_ENV] = str(SPIN_COUNT)
        seen = f'{load:.1f} of {cores} busy' if load is not None else 'load unknown'
        _chosen = (env, SPIN_ENV, str(SPIN_COUNT),
                   f'the usable cores were idle at start ({seen}): small operations stay fast')


def describe(env: MutableMapping[str, str] = os.environ) -> str:
    """What idle threads do in this process, and who chose it and why: for the run's thread line."""
    given = {k: env[k] for k in USER_KEYS if k in env}
    policy = env.get(POLICY_ENV, '').upper()
    if policy == 'PASSIVE' or env.get(SPIN_ENV) == '0':
        words = 'sleep at once'
    elif policy == 'ACTIVE':
        words = 'spin until work comes'
    elif SPIN_ENV in env:
        words = 'spin briefly, then sleep'
    else:
        words = 'spin for milliseconds, then sleep'
    setting = ', '.join(f'{k}={v}' for k, v in given.items()) or f"GNU OpenMP's default: {POLICY_ENV} unset"
    ours = _chosen is not None and _chosen[0] is env and env.get(_chosen[1]) == _chosen[2]
    chose = f'set here: {_chosen[3]}' if ours else 'as given' if given else ''
    return f'idle threads {words} ({setting}{"; " + chose if chose else ""})'
