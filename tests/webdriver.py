"""A headless Chromium for the browser tests, driven by chromedriver's W3C WebDriver HTTP API with the standard
library alone: no Python package to install, only Debian's `chromium` and `chromium-driver`.

    with Browser() as b:                      # Browser.missing() says why it cannot start ('' when it can)
        b.get('file:///tmp/out/index.html')
        b.run('return document.title')
        b.click('th button'); b.drag('.handle', -50, 0); shot = b.screenshot()   # RGB uint8, viewport

The browser runs headless in a fresh, empty profile without background network traffic (no sync, component
updates, QUIC), so a test sees the page as it is on disk, and nothing is left behind: `close` ends the session
(chromedriver quits the browser) and then the chromedriver process this object started.
"""
import base64
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from typing import Any, List, Optional, Tuple

import cv2
import numpy as np

BROWSERS = ('chromium', 'chromium-browser', 'google-chrome')
DRIVERS = ('chromedriver',)
HOW_TO_INSTALL = ('apt-get install -y chromium chromium-driver (Debian, as root; .ci/run does this in CI)')
ELEMENT = 'element-6066-11e4-a52e-4f735466cecf'  # the W3C key of an element reference
FLAGS = ('--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync',
         '--force-device-scale-factor=1', '--hide-scrollbars')


def _which(names: Tuple[str, ...]) -> Optional[str]:
    return next((p for p in map(shutil.which, names) if p), None)


class Browser:
    def __init__(self, width: int = 1100, height: int = 1000, timeout: float = 30):
        browser, driver = _which(BROWSERS), _which(DRIVERS)
        if not (browser and driver):
            raise RuntimeError(self.missing())
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix='chromium-profile-')
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            self.port = s.getsockname()[1]
        self.driver = subprocess.Popen([driver, f'--port={self.port}'], stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        self.session = None
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    if self._call('GET', '/status').get('ready'):
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or self.driver.poll() is not None:
                    raise RuntimeError(f'{driver} did not start on port {self.port}')
                time.sleep(0.05)
            options = {'binary': browser, 'args': [*FLAGS, f'--user-data-dir={self.profile}',
                                                   f'--window-size={width},{height}']}
            caps = {'capabilities': {'alwaysMatch': {'browserName': 'chrome', 'goog:chromeOptions': options}}}
            self.session = self._call('POST', '/session', caps)['sessionId']
        except BaseException:
            self.close()
            raise

    @staticmethod
    def missing() -> str:
        """Why no browser can start here: the programs not on PATH ('' when both are)."""
        gone = [what for what, names in (('chromium', BROWSERS), ('chromedriver', DRIVERS)) if not _which(names)]
        return f'{" and ".join(gone)} not found: {HOW_TO_INSTALL}' if gone else ''

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f'http://127.0.0.1:{self.port}{path}', data=data, method=method,
                                     headers={'Content-Type': 'application/json'})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as f:
                return json.loads(f.read())['value']
        except urllib.error.HTTPError as e:  # WebDriver errors: {"value": {"error": ..., "message": ...}}
            value = json.loads(e.read() or b'{}').get('value', {})
            raise AssertionError(f'WebDriver {path}: {value.get("error")}: {value.get("message", "")[:500]}') from None

    def _session(self, method: str, path: str, body: Any = None) -> Any:
        return self._call(method, f'/session/{self.session}{path}', body)

    def get(self, url: str) -> None:
        self._session('POST', '/url', {'url': url})

    def run(self, script: str, *args: Any) -> Any:
        """The value of a function body run in the page (`arguments[i]`: args)."""
        return self._session('POST', '/execute/sync', {'script': script, 'args': list(args)})

    def run_async(self, script: str, *args: Any) -> Any:
        """Like run, the result given to the callback `arguments[arguments.length - 1]`."""
        return self._session('POST', '/execute/async', {'script': script, 'args': list(args)})

    def element(self, css: str) -> str:
        return self._session('POST', '/element', {'using': 'css selector', 'value': css})[ELEMENT]

    def click(self, css: str) -> None:
        self._session('POST', f'/element/{self.element(css)}/click', {})

    def _pointer(self, actions: List[dict]) -> None:
        self._session('POST', '/actions', {'actions': [{'type': 'pointer', 'id': 'mouse', 'parameters':
                                                        {'pointerType': 'mouse'}, 'actions': actions}]})
        self._session('DELETE', '/actions')

    def drag(self, css: str, dx: int, dy: int) -> None:
        """Press the mouse on the element's centre, move it by (dx, dy) in a few steps, release it."""
        start = {'type': 'pointerMove', 'duration': 0, 'origin': {ELEMENT: self.element(css)}, 'x': 0, 'y': 0}
        steps = [{'type': 'pointerMove', 'duration': 20, 'origin': 'pointer', 'x': round(dx / 4), 'y': round(dy / 4)}
                 for _ in range(3)]
        last = {'type': 'pointerMove', 'duration': 20, 'origin': 'pointer', 'x': dx - 3 * round(dx / 4),
                'y': dy - 3 * round(dy / 4)}
        self._pointer([start, {'type': 'pointerDown', 'button': 0}, *steps, last, {'type': 'pointerUp', 'button': 0}])

    def click_at(self, css: str, x: int, y: int) -> None:
        """A mouse click (x, y) CSS pixels from the element's centre."""
        self._pointer([{'type': 'pointerMove', 'duration': 0, 'origin': {ELEMENT: self.element(css)}, 'x': x, 'y': y},
                       {'type': 'pointerDown', 'button': 0}, {'type': 'pointerUp', 'button': 0}])

    def screenshot(self) -> np.ndarray:
        """The viewport as an RGB uint8 image (CSS pixels: the scale factor is 1)."""
        png = base64.b64decode(self._session('GET', '/screenshot'))
        return cv2.cvtColor(cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)

    def close(self) -> None:
        try:
            if self.session is not None:
                self._session('DELETE', '')  # chromedriver quits the browser
                self.session = None
        except (OSError, AssertionError):
            pass
        finally:
            if self.driver.poll() is None:
                self.driver.terminate()
                try:
                    self.driver.wait(10)
                except subprocess.TimeoutExpired:
                    self.driver.kill()
                    self.driver.wait()
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> 'Browser':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
