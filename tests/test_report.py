"""`kernelsmith report` on a real run dir (a short offline evolution on the CPU), checked in headless Chromium.

The page is rendered with `chromium --headless --dump-dom` (the DOM after the page's script ran) and a
screenshot is kept under test-artifacts/ (git-ignored). Without Chromium the browser tests skip, except in CI
(CI=true), where they fail: `.ci/run` installs it.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelsmith.cli import app

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tasks/level2/02_scale_bias_clamp_sigmoid.py"
ARTIFACTS = ROOT / "test-artifacts"
EVIL = ('# </script><script>document.title="pwned"</script>\n'
        '# <img src=x onerror="document.body.setAttribute(\'data-pwned\', 1)"> & "quotes"\n')


def chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (CI installs it in .ci/run)")
        pytest.skip("chromium is not installed (apt-get install chromium); CI runs these tests")
    return exe


def render(page: Path, fragment: str = "", screenshot: Path | None = None) -> str:
    """The DOM after the page's scripts ran."""
    exe = chromium()
    url = page.resolve().as_uri() + fragment
    base = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
            f"--user-data-dir={page.parent / '.chromium-profile'}"]
    dom = subprocess.run([*base, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    if screenshot is not None:
        shot = subprocess.run([*base, f"--screenshot={screenshot}", "--window-size=1400,2600", url],
                              capture_output=True, text=True, timeout=120)
        assert shot.returncode == 0 and screenshot.is_file(), shot.stderr[-2000:]
    return dom.stdout


class Dom(HTMLParser):
    """Text of elements by id, attributes of every element (enough to read a dumped page)."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: dict[str, str] = {}
        self._open: list[tuple[str, str | None]] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list) -> None:  # noqa: ANN001
        a = {k: v or "" for k, v in attrs}
        self.elements.append((tag, a))
        if tag not in ("br", "meta", "img", "input", "link", "hr", "wbr"):  # HTML void elements
            self._open.append((tag, a.get("id")))
            if a.get("id"):
                self.text.setdefault(a["id"], "")

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            t, _ = self._open.pop()
            if t == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, ident in self._open:
            if ident:
                self.text[ident] += data

    def find(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [a for t, a in self.elements if t == tag and all(a.get(k) == v for k, v in attrs.items())]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("report") / "run"
    exe = Path(sys.executable).parent / "kernelsmith"  # the installed console script, as a user runs it
    proc = subprocess.run([str(exe), "evolve", str(TASK), "--device", "cpu", "--rounds", "2", "--population", "2",
                           "--run-dir", str(d)], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return d


def programs(run: Path) -> dict[str, dict]:
    with sqlite3.connect(run / "run.db") as c:
        return {n: {"code": code, "status": st, "parent": par} for n, code, st, par in c.execute(
            "select p.name, p.code, v.status, q.name from programs p left join verdicts v on v.program_id = p.id "
            "left join programs q on q.id = p.parent_id")}


def write(path: Path, out: Path | None = None) -> Path:
    args = ["report", str(path)] + (["--out", str(out)] if out else [])
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    page = out or path / "report.html"
    assert page.is_file()
    return page


def test_report_is_self_contained(run_dir: Path) -> None:
    page = write(run_dir).read_text()
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page and "<svg" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing fetched from anywhere
    assert "<link" not in page and "@import" not in page and "url(" not in page


def test_report_in_chromium(run_dir: Path) -> None:
    progs = programs(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    page = write(run_dir, run_dir / "custom.html")
    target = next(n for n in progs if progs[n]["parent"])  # a child: it has a diff to its parent
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report_run.png"
    dom = Dom(render(page, f"#program={target}", screenshot=shot))
    print(f"screenshot: {shot}")

    body = dom.find("body")[0]
    assert body.get("data-ready") == "1" and body.get("data-open") == target  # the script ran and opened it
    nodes = dom.find("g", **{"class": "node"}) + dom.find("g", **{"class": "node selected"})
    assert sorted(n["data-program"] for n in nodes) == sorted(progs)  # one node per stored program
    assert [n["data-program"] for n in dom.find("g", **{"class": "node selected"})] == [target]
    assert dom.text["p-code"] == progs[target]["code"]  # filled in by the script from the data block
    diff = dom.text["p-diff"]
    assert diff.startswith("--- parent\n+++ program") and "@@" in diff
    verdict = json.loads(dom.text["p-verdict"])
    assert verdict["status"] == progs[target]["status"] and "guards" in verdict
    assert target in dom.text["p-title"] and f"parent {progs[target]['parent']}" in dom.text["p-title"]
    best = " ".join(dom.text["best-speedup"].split())
    assert "not measured (cpu)" in best and summary["best_id"] in best
    assert dom.text["program-count"] == str(len(progs))
    assert "speedup not measured" in dom.text["chart-speedup"]
    assert dom.find("table", id="archive-grid") and dom.find("a", **{"class": "prog", "data-program":
                                                                     summary["best_id"]})
    assert dom.text["tokens-total"] == "tokens (this run)0"
    with sqlite3.connect(run_dir / "run.db") as c:  # every guard the run's verdicts name is in the table
        guards = {g["name"] for (v,) in c.execute("select verdict from verdicts")
                  for g in json.loads(v).get("guards") or []}
    if guards:
        assert all(name in dom.text["failures-by-guard"] for name in guards)
    else:
        assert "failures-by-guard" not in dom.text


def test_report_measured_speedups_failures_and_escaping(run_dir: Path, tmp_path: Path) -> None:
    """The same run with speedups, a failure and hostile code written into its database."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    progs = programs(run)
    fast = sorted(n for n in progs if progs[n]["parent"])[0]  # a child: made faster
    bad = sorted(n for n in progs if n not in (fast, "seed"))[-1]  # another program: made to fail
    with sqlite3.connect(run / "run.db") as c:
        def update(name: str, **fields: object) -> None:
            pid = c.execute("select id from programs where name = ?", (name,)).fetchone()[0]
            v = json.loads(c.execute("select verdict from verdicts where program_id = ?", (pid,)).fetchone()[0])
            v.update(fields)
            c.execute("update verdicts set verdict = ?, status = ?, speedup = ? where program_id = ?",
                      (json.dumps(v), v["status"], v.get("speedup"), pid))
            return pid

        update(fast, speedup=2.5, speedup_ci=[2.4, 2.6])
        pid = update(bad, status="incorrect", correct=False, error="output 0: max rel err 0.5 </pre><b id=evil-b>x</b>")
        c.execute("update programs set code = ? where id = ?", (EVIL + progs[bad]["code"], pid))
    s = json.loads((run / "summary.json").read_text())
    s.update(best_id=fast, best_speedup=2.5)
    (run / "summary.json").write_text(json.dumps(s))

    page = write(run)
    raw = page.read_text()
    assert '<script>document.title="pwned"' not in raw and "<img src=x" not in raw
    dom = Dom(render(page, f"#program={bad}"))
    assert dom.text.get("ks-data") is not None and dom.find("title")
    titles = re.findall(r"<title>([^<]*)</title>", render(page))
    assert "pwned" not in " ".join(titles)
    assert not dom.find("img") and not [a for _, a in dom.elements if "data-pwned" in a]
    assert not dom.find("b", id="evil-b")  # the error text stayed text
    assert dom.text["p-code"].startswith(EVIL)  # shown, as text
    assert dom.text["p-error"].endswith("</pre><b id=evil-b>x</b>")
    assert "\\u003c/script\\u003e" in raw and raw.count("</script>") == 2  # the data block cannot be closed
    assert f"2.500× ({fast}, correct)" in " ".join(dom.text["best-speedup"].split())
    assert "best speedup per round" in dom.text["chart-speedup"] and "2.50×" in dom.text["chart-speedup"]
    assert dom.find("circle", **{"class": "pt"})
    failures = " ".join(dom.text["failures-by-status"].split())
    assert "incorrect" in failures and bad in failures


def test_bench_report_links_task_runs(tmp_path: Path, run_dir: Path) -> None:
    bench = tmp_path / "bench"
    (bench / "runs/level2").mkdir(parents=True)
    shutil.copytree(run_dir, bench / "runs/level2/02_scale_bias_clamp_sigmoid")
    rows = [{"task": "level2/02_scale_bias_clamp_sigmoid.py", "level": "level2", "status": "correct",
             "speedup": None, "run_dir": "runs/level2/02_scale_bias_clamp_sigmoid"},
            {"task": "level1/01_relu.py", "level": "level1", "status": "no_candidate",
             "error": "no candidate at c/level1/01_relu.py (counted as not correct) <i id=evil-i>"}]
    (bench / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (bench / "bench.json").write_text(json.dumps({"settings": {"mode": "evolve", "device": "cpu"}}))
    page = write(bench, tmp_path / "bench.html")
    dom = Dom(render(page, screenshot=ARTIFACTS / "report_bench.png" if ARTIFACTS.is_dir() else None))
    links = dom.find("a", **{"class": "run-link"})
    assert [a["href"] for a in links] == ["bench/runs/level2/02_scale_bias_clamp_sigmoid/report.html"]
    assert (bench / "runs/level2/02_scale_bias_clamp_sigmoid/report.html").is_file()
    tasks = " ".join(dom.text["tasks"].split())
    assert "no_candidate" in tasks and "counted as not correct" in tasks
    assert not dom.find("i", id="evil-i") and html.escape("<i id=evil-i>") in page.read_text()
    metrics = " ".join(dom.text["metrics-eager"].split())
    assert "overall2150.0%" in metrics.replace(" ", "")  # 2 tasks, 1 correct, 50% correct
    assert "not measured" in dom.text["metrics-compile"] or "not requested" in dom.text["metrics-compile"]


def test_report_bad_input() -> None:
    result = CliRunner().invoke(app, ["report", "/nonexistent/run"])
    assert result.exit_code == 2 and "/nonexistent/run: no such run or bench directory" in result.output
