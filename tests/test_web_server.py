"""The real `wfsched web` process: serving, the loopback rule, basic auth,
the password file, and its refusals (each a clear line and an exit status)."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daemon import define, wfsched
from tests.webworld import WebServer

pytest.importorskip("jinja2")
pytest.importorskip("waitress")

PASSWORD = "correct horse battery staple"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    path = tmp_path / "store"
    define(path, tmp_path, "nightly", '[trigger]\ncron = "0 3 * * *"\n[run]\ncommand = ["true"]\n')
    return path


def password_file(store: Path, tmp_path: Path, password: str = PASSWORD) -> Path:
    target = tmp_path / "web.passwd"
    made = wfsched(
        store, "web", "hash-password", "--user", "ops", str(target), input=password + "\n"
    )
    assert made.returncode == 0, made.stderr
    assert PASSWORD not in made.stdout + made.stderr
    return target


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_serves_the_store_read_only_on_loopback_and_answers_other_methods_405(
    store: Path,
) -> None:
    before = wfsched(store, "list", "--json").stdout
    server = WebServer(store, "--listen", "127.0.0.1:0")
    try:
        url = server.wait_serving()
        assert url.startswith("http://127.0.0.1:")
        page = server.fetch("/schedules")
        assert page.status == 200 and "nightly" in page.body
        assert server.fetch("/schedules/nightly").status == 200
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            refused = server.fetch("/schedules/nightly", method=method)
            assert refused.status == 405 and refused.headers["allow"] == "GET, HEAD"
    finally:
        code = server.stop()
    assert code == 0, server.log
    assert wfsched(store, "list", "--json").stdout == before


def test_a_non_loopback_address_without_a_password_file_is_refused(store: Path) -> None:
    result = wfsched(store, "web", "--listen", "0.0.0.0:0")
    assert result.returncode == 2
    assert "not a loopback address" in result.stderr and "--password-file" in result.stderr
    assert "Traceback" not in result.stderr


def test_basic_auth_gates_every_page_and_wrong_credentials_get_401(
    store: Path, tmp_path: Path
) -> None:
    secret_file = password_file(store, tmp_path)
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    line = secret_file.read_text()
    assert line.startswith("ops:$scrypt$ln=") and PASSWORD not in line
    server = WebServer(store, "--listen", "0.0.0.0:0", "--password-file", str(secret_file))
    try:
        server.url = server.wait_serving().replace("0.0.0.0", "127.0.0.1")
        missing = server.fetch("/schedules")
        assert missing.status == 401 and "Basic" in missing.headers["www-authenticate"]
        assert server.fetch("/schedules", headers=basic("ops", "wrong")).status == 401
        assert server.fetch("/schedules", headers=basic("root", PASSWORD)).status == 401
        assert server.fetch("/static/app.js", headers=basic("ops", "")).status == 401
        for _ in range(2):  # the second answer comes from the verified cache
            good = server.fetch("/schedules", headers=basic("ops", PASSWORD))
            assert good.status == 200 and "nightly" in good.body
        assert (
            server.fetch("/schedules", method="POST", headers=basic("ops", PASSWORD)).status == 405
        )
    finally:
        server.stop()


def test_the_password_file_is_checked_at_start(store: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.write_text("ops:plaintext-password\n")
    result = wfsched(store, "web", "--password-file", str(broken))
    assert result.returncode == 2 and "not a password file" in result.stderr
    assert "plaintext-password" not in result.stderr
    gone = wfsched(store, "web", "--password-file", str(tmp_path / "absent"))
    assert gone.returncode == 2 and "cannot read it" in gone.stderr


def test_hash_password_refuses_an_empty_password_and_a_bad_user(
    store: Path, tmp_path: Path
) -> None:
    target = tmp_path / "out"
    empty = wfsched(store, "web", "hash-password", "--user", "ops", str(target), input="\n")
    assert empty.returncode == 2 and "empty" in empty.stderr and not target.exists()
    colon = wfsched(store, "web", "hash-password", "--user", "a:b", str(target), input="x\n")
    assert colon.returncode == 2 and "no colon" in colon.stderr and not target.exists()


def test_the_hash_is_salted_and_verified_in_constant_time() -> None:
    from wfsched.web.auth import Credential, hash_password

    first, second = hash_password(PASSWORD), hash_password(PASSWORD)
    assert first != second  # salted
    assert Credential("ops", first).matches("ops", PASSWORD)
    assert not Credential("ops", first).matches("ops", PASSWORD + "!")
    assert not Credential("ops", first).matches("opz", PASSWORD)


def test_bad_listen_addresses_and_a_missing_store_are_clear_errors(
    store: Path, tmp_path: Path
) -> None:
    for listen in ("nohost", "127.0.0.1:99999", "127.0.0.1:http"):
        result = wfsched(store, "web", "--listen", listen)
        assert result.returncode == 2 and "expected HOST:PORT" in result.stderr, listen
    missing = wfsched(tmp_path / "none", "web")
    assert missing.returncode == 3 and "no store at" in missing.stderr
    assert not (tmp_path / "none").exists()


def test_without_the_web_extra_it_says_which_extra_to_install(store: Path) -> None:
    code = (
        "import sys; sys.modules['jinja2'] = None; sys.argv = ['wfsched', '--store', sys.argv[1],"
        " 'web']; from wfsched.entry import main; main()"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(store)],
        capture_output=True,
        text=True,
        env=os.environ,
        timeout=60,
    )
    assert result.returncode == 2
    assert "pip install 'wfsched[web]'" in result.stderr and "jinja2" in result.stderr
