"""Progress where users wait (main_test, export, extract_subimages, make_lmdb, the cache fill): a tqdm bar on a
terminal, plain lines (or nothing) elsewhere, so that logs do not fill up with redraws."""
import io
import sys

from utils.progress import Steps, progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def terminal(monkeypatch) -> Terminal:
    """stderr as a terminal (set inside the test: pytest's output capture replaces sys.stderr after fixtures)."""
    screen = Terminal()
    monkeypatch.setattr(sys, 'stderr', screen)
    return screen


def test_a_terminal_gets_a_bar_and_no_lines(monkeypatch):
    terminal_ = terminal(monkeypatch)
    said = []
    assert list(progress(range(20), 20, 'frames', say=said.append, every=0.1, unit='frame')) == list(range(20))
    assert said == []
    shown = terminal_.getvalue()
    assert shown.startswith('\rframes:   0%|') and 'frame/s' in shown and shown.endswith('\r')  # cleared when done


def test_elsewhere_lines_at_whole_parts_without_float_drift(capsys):
    said = []
    assert list(progress(range(10), 10, 'reds -> r.lmdb', say=said.append, every=0.1)) == list(range(10))
    assert said == [f'reds -> r.lmdb: {i}/10' for i in range(1, 11)]  # 0.1 * 3 > 0.3 must not skip the third
    said.clear()
    list(progress(range(7), 7, 'x', say=said.append, every=0.25))
    assert said == ['x: 2/7', 'x: 4/7', 'x: 6/7', 'x: 7/7']
    assert capsys.readouterr().err == ''


def test_steps_tick_a_bar_on_a_terminal_and_stay_silent_elsewhere(monkeypatch):
    screen = terminal(monkeypatch)
    out = io.StringIO()
    with Steps(3, 'export') as steps:
        for name in ('building', 'translating', 'writing'):
            steps.start(name)
            steps.done()
        steps.say('wrote x.onnx', file=out)
    shown = screen.getvalue()
    assert '\rexport:   0%|' in shown and 'step/s, building]' in shown and 'writing]' in shown
    assert out.getvalue() == 'wrote x.onnx\n'  # a line above the bar, not inside it
    quiet = io.StringIO()
    monkeypatch.setattr(sys, 'stderr', quiet)  # not a terminal
    with Steps(2, 'export') as steps:
        steps.start('building')
        steps.done()
        steps.say('a line', file=out)
    assert quiet.getvalue() == '' and out.getvalue().endswith('a line\n')
