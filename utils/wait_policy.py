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
CPU threads"). A neighbour that starts later meets a short spin, which gives its core up soon. Where the cores are
shared, the thread count leaves the busy ones to their programs too (utils/dist/group.py `set_cpu_threads`, from
`others_load_at_start`: the load over the whole start-up, a steadier figure than this sample).

The user's own OMP_WAIT_POLICY, GOMP_SPINCOUNT or KMP_BLOCKTIME wins, unsampled.
"""
import os
import time
from typing import MutableMapping, NamedTuple, Optional

from utils.cores import LoadMark, affinity, load_mark, others_load_since

SPIN_ENV = 'GOMP_SPINCOUNT'
POLICY_ENV = 'OMP_WAIT_POLICY'
USER_KEYS = (POLICY_ENV, SPIN_ENV, 'KMP_BLOCKTIME')
SPIN_COUNT = 10000  # iterations of GNU OpenMP's spin loop (its default: 300,000)
SHARED_CORES = 0.5  # other programs' load on this process's cores, in cores, above which idle threads sleep at once
SAMPLE_S = 0.1
WINDOW_S = 1.0  # the shortest start-up over which `others_load_at_start` trusts its own measure over the sample


class Choice(NamedTuple):
    """What `choose` set (POLICY_ENV: it found the cores shared), in which mapping and why, and when it looked."""
    env: MutableMapping[str, str]
    key: str
    value: str
    reason: str
    load: Optional[float]  # what the sample found (in cores)
    mark: Optional[LoadMark]


# `choose`'s last choice (None: it set nothing). `describe` claims it only for that mapping while it still holds
# that value: another mapping's setting is the user's.
_chosen: Optional[Choice] = None


def others_load(mark: Optional[LoadMark], sample_s: float = SAMPLE_S) -> Optional[float]:
    """Other programs' load on this process's cores over `sample_s` from `mark` (in cores), or None where it cannot
    be read."""
    if mark is None:
        return None
    time.sleep(sample_s)
    return others_load_since(mark)


def choose(env: MutableMapping[str, str] = os.environ, load: Optional[float] = None) -> None:
    """Set how idle threads wait unless the user did: a short spin on idle cores, none on shared ones. Call
    before `import torch`. `load`: other programs' load in cores (None: sampled now)."""
    global _chosen
    _chosen = None
    if any(k in env for k in USER_KEYS):
        return
    mark = load_mark()
    load = others_load(mark) if load is None else load
    cores = len(affinity())
    if load is not None and load >= SHARED_CORES:
        env[POLICY_ENV] = 'PASSIVE'
        _chosen = Choice(env, POLICY_ENV, 'PASSIVE',
                         f'other processes kept {load:.1f} of the {cores} usable core{"s" if cores > 1 else ""} busy '
                         f'at start: spinning would take their time', load, mark)
    else:
        env[SPIN_ENV] = str(SPIN_COUNT)
        seen = f'{load:.1f} of {cores} busy' if load is not None else 'load unknown'
        _chosen = Choice(env, SPIN_ENV, str(SPIN_COUNT),
                         f'the usable cores were idle at start ({seen}): small operations stay fast', load, mark)


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
    chose = f'set here: {_chosen.reason}' if _ours(env) else 'as given' if given else ''
    return f'idle threads {words} ({setting}{"; " + chose if chose else ""})'


def _ours(env: MutableMapping[str, str]) -> bool:
    return _chosen is not None and _chosen.env is env and env.get(_chosen.key) == _chosen.value


def others_load_at_start(env: MutableMapping[str, str] = os.environ) -> Optional[float]:
    """Other programs' load on this process's cores (in cores) from `choose` until now, where `choose` found them
    shared for `env` (else None): measured over the whole start-up (torch's import, the options), which says more
    than the short sample `choose` could afford before torch loads, and with this process's own CPU time left out
    (the sample's figure where less than WINDOW_S passed)."""
    if _chosen is None or not _ours(env) or _chosen.key != POLICY_ENV:
        return None
    mark = _chosen.mark
    if mark is None or time.monotonic() - mark.wall < WINDOW_S:
        return _chosen.load
    return others_load_since(mark)
