"""Time to the first completed iteration: resumed run / fresh run of main_train.py (tiny config).

Each measurement is a separate `python main_train.py` process (through a wrapper that registers model
`timed_plain`, ModelPlain printing a wall-clock timestamp once its first step is done, and trains it: a model
is one class registered where it is defined; production code has no hook). The time runs from just before
the parent starts the process
to the end of the first optimizer step, so interpreter start, imports, option parsing, dataset and
loader construction, model building and (for resume) finding and loading the checkpoint all count.
The resumed run continues from a copy of the same iteration-4 checkpoint every rep; the sampler
skips the consumed samples (no data replay). Fresh and resumed runs alternate rep by rep.

    python bench/bench_resume.py [--quick] [--reps 5]

`--quick` (one fresh and one resumed run) is a smoke run, noisy.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Sequence

from common import entry, parse_reps, reps_parser

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, '..')


TIMED_MODEL = 'timed_plain'  # the runs' `model`: ModelPlain, printing when its first step is done


def child(argv: Sequence[str]) -> int:
    """Run main_train.main(argv) as model `timed_plain` (registered here, and set over whatever the option file
    says: a plain model's file times as it trains), printing `MAIN <t>` after imports and `FIRST_STEP <t> <iter>`
    once."""
    sys.path.insert(0, ROOT)
    import main_train
    from models.model_plain import ModelPlain
    from models.registry import MODELS
    print(f'MAIN {time.time():.6f}', flush=True)

    @MODELS.register(TIMED_MODEL)
    class TimedPlain(ModelPlain):
        """ModelPlain printing the wall-clock time at the end of its first optimizer step."""

        reported = False

        def step(self, step: int, loss: Any, applied: Any = None) -> None:
            """ModelPlain's step, then the time once: the end of what is measured."""
            super().step(step, loss, applied)
            if not TimedPlain.reported:
                TimedPlain.reported = True
                print(f'FIRST_STEP {time.time():.6f} {step}', flush=True)
    return main_train.main([*argv, '--set', f'model="{TIMED_MODEL}"'])


def timed_run(opt_path: str, env: Dict[str, str], finish: bool = False) -> Dict[str, float]:
    """Launch one run; unless `finish`, kill it (our own child, by pid) once the first step is done."""
    t0 = time.time()
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), '--child', '--opt', opt_path],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    marks: Dict[str, List[str]] = {}
    lines = []
    for ln in proc.stdout:
        lines.append(ln)
        if ln.startswith(('MAIN ', 'FIRST_STEP ')):
            marks[ln.split()[0]] = ln.split()[1:]
        if 'FIRST_STEP' in marks and not finish:
            proc.kill()
            break
    _, err = proc.communicate(timeout=600)
    if 'FIRST_STEP' not in marks or (finish and proc.returncode != 0):
        raise RuntimeError(f'run failed ({proc.returncode}):\n{"".join(lines)[-2000:]}\n{err[-2000:]}')
    return {'first': float(marks['FIRST_STEP'][0]) - t0, 'imports': float(marks['MAIN'][0]) - t0,
            'iter': int(marks['FIRST_STEP'][1])}


def main(argv: Sequence[str] = None) -> None:
    a = parse_reps(reps_parser(__doc__, 'smoke run: one rep per side', 'reps per side (default 5; --quick 1)'), argv, 5)
    sys.path.insert(0, ROOT)
    sys.path.insert(0, os.path.join(ROOT, 'tests'))
    sys.path.insert(0, HERE)
    from bench_loop import machine
    from conftest import clean_env, dataset_options, tiny_options, write_options
    from data.synthetic.demo import ensure_demo_data
    print(machine())
    env = clean_env()
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, 'demo_data')  # generate_demo writes only inside a demo_data folder
        for name in ('train', 'test'):
            ensure_demo_data(dataset_options('dncnn', name, generate_demo='images', dataroot_H=os.path.join(data, name)))

        def options(root: str, total: int) -> str:
            opt = tiny_options(root, data, total_iter=total, checkpoint_save=4, checkpoint_test=4)
            return write_options(os.path.join(tmp, f'{os.path.basename(root)}.json'), opt)

        base_root = os.path.join(tmp, 'base')
        first = timed_run(options(base_root, 4), env, finish=True)  # writes the iteration-4 checkpoint; also a warm-up
        assert first['iter'] == 1
        times: Dict[str, List[Dict[str, float]]] = {'fresh': [], 'resume': []}
        for i in range(a.reps):
            fresh = timed_run(options(os.path.join(tmp, f'fresh{i}'), 5), env)
            assert fresh['iter'] == 1, fresh
            times['fresh'].append(fresh)
            root = os.path.join(tmp, f'resume{i}')
            shutil.copytree(base_root, root)
            resumed = timed_run(options(root, 5), env)
            assert resumed['iter'] == 5, f'expected to resume at iteration 5, got {resumed}'
            times['resume'].append(resumed)
        med = {k: {f: statistics.median(r[f] for r in v) for f in ('first', 'imports')} for k, v in times.items()}
        print(f'workload: tiny DnCNN (tests/conftest.py tiny_options), {a.reps} reps per side, interleaved '
              f'fresh,resume,...; medians; time from process launch')
        for k in ('fresh', 'resume'):
            print(f'  {k:<6s}: first step done after {med[k]["first"]:.2f} s (interpreter + imports '
                  f'{med[k]["imports"]:.2f} s, setup + first step {med[k]["first"] - med[k]["imports"]:.2f} s)')
        print(f'time to first step, resume / fresh start {"":14s} ratio {med["resume"]["first"] / med["fresh"]["first"]:6.3f}'
              f'  goal <= 1.2')


if __name__ == '__main__':
    entry(main, child=child)
