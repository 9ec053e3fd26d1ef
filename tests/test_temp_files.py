"""The test suite and the launchers clean up after themselves: nothing piles up in the temporary folder.

pytest.ini removes the tmp_path folders of passing tests (a full run writes hundreds of MB of runs and
demo data); tests/conftest.py points TMPDIR into pytest's base folder, so what the tests and the
processes they start put in the temporary folder goes with it; and a local launch removes the log
folder torch's elastic agent makes for it.
"""
import os
import sys

from conftest import ROOT, clean_env, run

INNER_TEST = '''
import subprocess
import sys
import tempfile

from conftest import clean_env


def test_that_writes_in_its_tmp_path_and_in_the_temporary_folder(tmp_path):
    (tmp_path / 'run.log').write_text('x' * 1000)
    tempfile.mkdtemp(prefix='stray_in_test_')
    subprocess.run([sys.executable, '-c', 'import tempfile; tempfile.mkdtemp(prefix="stray_in_child_")'],
                   env=clean_env(), check=True)
'''


def _left_in(folder):
    """Every file and folder under `folder`, but pytest's own per-user folder and its symlinks."""
    left = []
    for top, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(top, name)
            if not (top == str(folder) and name.startswith('pytest-of-')) and not os.path.islink(path):
                left.append(os.path.relpath(path, folder))
    return sorted(left)


def test_a_passing_test_session_leaves_nothing_in_the_temporary_folder(tmp_path):
    """A session of the project's pytest.ini and conftest.py, with its own temporary folder to look at."""
    inner, temp = tmp_path / 'inner', tmp_path / 'temp'
    inner.mkdir()
    temp.mkdir()
    (inner / 'test_inner.py').write_text(INNER_TEST)
    env = clean_env(TMPDIR=str(temp), PYTHONPATH=os.pathsep.join([os.path.join(ROOT, 'tests'), ROOT]))
    res = run([sys.executable, '-m', 'pytest', '-q', '-c', os.path.join(ROOT, 'pytest.ini'), '--rootdir', str(inner),
               '-p', 'conftest', '-p', 'no:cacheprovider', str(inner / 'test_inner.py')], env=env, cwd=str(inner))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert '1 passed' in res.stdout
    assert _left_in(temp) == []


def test_a_local_launch_removes_the_log_folder_of_torchs_elastic_agent(tmp_path):
    """`launch_train.sh` / `python scripts/launch.py`, and main_train.py's gpu_ids relaunch, go through it."""
    temp = tmp_path / 'temp'
    temp.mkdir()
    script = tmp_path / 'rank.py'
    # one write per rank (a pipe write this small is atomic): unbuffered print()s of both ranks interleave
    script.write_text('import os\nos.write(1, f"rank {os.environ[\'RANK\']} of {os.environ[\'WORLD_SIZE\']}\\n".encode())\n')
    res = run([sys.executable, os.path.join(ROOT, 'scripts', 'launch.py'), '--nproc', '2', str(script)],
              env=clean_env(TMPDIR=str(temp), OMP_NUM_THREADS='1'), timeout=120)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert 'rank 0 of 2' in res.stdout and 'rank 1 of 2' in res.stdout
    assert _left_in(temp) == []
