"""How the suite runs itself (tests/conftest.py, pytest.ini): in parallel on the usable cores, with the pytest
process computing as the entry points do, and the processes the tests start seeing the user's environment."""
import os
import subprocess
import sys

import pytest

import conftest
from conftest import ROOT, clean_env


@pytest.mark.parametrize('cores, workers', [(1, 0), (2, 2), (6, 6), (64, 8)])
def test_n_auto_is_one_worker_per_usable_core_at_most_8_and_none_on_one_core_in_ci_too(monkeypatch, cores, workers):
    monkeypatch.setattr(conftest, 'usable_cores', lambda: cores)
    monkeypatch.delenv('CI', raising=False)
    assert conftest.pytest_xdist_auto_num_workers(None) == workers
    monkeypatch.setenv('CI', 'true')
    assert conftest.pytest_xdist_auto_num_workers(None) == workers


def test_the_processes_a_test_starts_see_the_users_environment_not_what_the_suite_set_for_itself(monkeypatch):
    """The suite sets OMP_WAIT_POLICY for its own process (unless the user did) and writes bytecode caches; a process
    it starts gets neither, so that the entry points' own start-up (which sets OMP_WAIT_POLICY) is what is tested."""
    assert os.environ['OMP_WAIT_POLICY'] and not sys.dont_write_bytecode
    monkeypatch.setenv('PYTHONDONTWRITEBYTECODE', '1')
    env = clean_env()
    assert 'PYTHONDONTWRITEBYTECODE' not in env and conftest.WAIT_POLICY_MARK not in env
    assert not [k for k in env if k.startswith('PYTEST_XDIST_') or k in ('PYTEST_CURRENT_TEST', 'PYTEST_VERSION')]
    assert ('OMP_WAIT_POLICY' in env) == (conftest.WAIT_POLICY_MARK not in os.environ)
    assert clean_env(PYTHONDONTWRITEBYTECODE='1')['PYTHONDONTWRITEBYTECODE'] == '1'  # a test may still ask for it
    monkeypatch.delenv(conftest.WAIT_POLICY_MARK, raising=False)  # as when the user had set it
    monkeypatch.setenv('OMP_WAIT_POLICY', 'ACTIVE')
    assert clean_env()['OMP_WAIT_POLICY'] == 'ACTIVE'


def test_the_readme_command_runs_the_tests_on_xdist_workers_and_n_0_in_one_process(tmp_path):
    """pytest.ini's default `-n auto`, with this conftest's worker count, runs the tests on workers (in the pytest
    process on one core); `-n 0` runs them in the pytest process."""
    (tmp_path / 'test_where.py').write_text('import os\n\ndef test_where():\n    with open(os.environ["WHERE"], "w") as f:\n'
                                            '        f.write(os.environ.get("PYTEST_XDIST_WORKER", "none"))\n')
    where = {}
    for mode, extra in (('default', []), ('one', ['-n', '0'])):
        out = tmp_path / mode
        env = clean_env(WHERE=str(out), PYTHONPATH=os.pathsep.join([os.path.join(ROOT, 'tests'), ROOT]))
        res = subprocess.run([sys.executable, '-m', 'pytest', '-q', '-c', os.path.join(ROOT, 'pytest.ini'), '--rootdir',
                              str(tmp_path), '-p', 'conftest', '-p', 'no:cacheprovider', str(tmp_path / 'test_where.py'),
                              *extra], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert res.returncode == 0 and '1 passed' in res.stdout, res.stdout + res.stderr
        where[mode] = out.read_text()
    assert where['one'] == 'none'
    assert where['default'] == 'none' if conftest.usable_cores() < 2 else where['default'].startswith('gw'), where
