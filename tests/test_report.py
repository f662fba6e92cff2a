"""`fathom report`: the study's tables with hand-checked numbers, HTML and Markdown output, a real
render in headless Chromium, and a report of a real quick osd-classic run on a local cluster."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest

from conftest import run_fathom
from fathom.analysis.data import load_run
from fathom.report import tables
from fathom.results.store import Store

DATA = Path(__file__).parent / "data"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SVG_NS = "{http://www.w3.org/2000/svg}"


@pytest.fixture(scope="module")
def published_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("rep") / "pub.db"
    run_fathom("import", "table", str(DATA / "crimson-vs-classic-2025.csv"), "--db", str(db), check=True)
    return db


@pytest.fixture(scope="module")
def doc(published_db):
    st = Store(published_db)
    return tables.build([load_run(st, "classic"), load_run(st, "seastore")])


def _summary(doc, wl, run):
    return dict(zip(doc.summary.headers, next(r for r in doc.summary.rows if r[0] == wl and r[1] == run)))


def test_summary_numbers_by_hand(doc):
    s = _summary(doc, "randread4k", "seastore")
    assert s["peak throughput"] == "396,901 IOPS" and s["peak at"] == "16"
    # power IOPS/clat: 504k (qd1), 548k (qd2), 579k (qd4), 387k (qd8) -> knee at 4
    assert s["knee at"] == "4"
    assert s["90% of peak at"] == "16"  # 0.9 x 396,901 = 357,211; qd8 has 313,379
    c = _summary(doc, "randread4k", "classic")
    assert c["peak throughput"] == "136,638 IOPS" and c["knee at"] == "1" and c["90% of peak at"] == "2"
    assert c["per OSD core at peak"] == "33,471 IOPS"  # 136,637.79 / 4.0823 cores
    w = _summary(doc, "seqwrite64k", "classic")
    assert w["peak throughput"] == "2,703.43 MiB/s" and w["peak at"] == "24"
    rw = _summary(doc, "randwrite4k", "seastore")
    assert rw["anomalies"] == "7 (at peak: osd_cpu_dropout)"  # the peak's OSD CPU sample is suspect


def test_detail_table_is_the_studys_table(doc):
    sec = next(s for s in doc.sections if s.workload == "randwrite4k")
    t = next(t for t in sec.tables if t.title.endswith("seastore"))
    assert t.headers[:11] == ["iodepth", "IOPS", "total_ios", "clat (ms)", "clat stdev (ms)", "p99 (ms)",
                              "usr_cpu (% of one core)", "sys_cpu (% of one core)", "OSD CPU (% of one core)",
                              "OSD mem (RSS MiB)", "OSD_mem as published (%MEM x threads, not a size)"]
    row40 = dict(zip(t.headers, next(r for r in t.rows if r[0] == "40")))
    assert row40["IOPS"] == "10,710" and row40["total_ios"] == "3,363" and row40["clat (ms)"] == "354.6"
    assert row40["OSD mem (RSS MiB)"] == "n/a" and row40["p99 (ms)"] == "n/a"
    assert "collapse" in row40["flags"] and "short_window" in row40["flags"]
    seq = next(s for s in doc.sections if s.workload == "seqread64k")
    assert seq.unit == "MiB/s" and seq.tables[0].headers[1] == "bw (MiB/s)"
    assert seq.tables[0].rows[0][1] == "2,259.54"


def _server_db(path: Path) -> None:
    """Two measured runs of one workload: "base" sampled OSD and MON; "gw" also RGW and MDS but no MON."""
    from fathom.results.model import OpStats, PointResult, base_metrics

    with Store(path) as st:
        for name, extra in (("base", {"mon_cpu": 3.0, "mon_mem_mib": 90.0}),
                            ("gw", {"rgw_cpu": 45.0, "rgw_mem_mib": 210.0, "mds_cpu": 1.5, "mds_mem_mib": 33.0})):
            run = st.create_run(name, suite="t")
            for i, depth in enumerate((1, 4)):
                r = PointResult(engine="fathom-engine", runtime_s=2.0,
                                ops={"write": OpStats(ops=1000 * depth, bytes=4096000 * depth, runtime_s=2.0,
                                                      lat_mean_ns=1e6 * depth, lat_stdev_ns=1e5)})
                m = {**base_metrics(r), "osd_cpu": 80.0 * depth, "osd_mem_mib": 700.0, **extra}
                st.record_point(run, i, f"randwrite4k/iodepth={depth}", "randwrite4k", "fathom-engine",
                                {"rw": "randwrite", "bs": 4096, "iodepth": depth}, "done", metrics=m)
            st.finish_run(run, "done")


def test_server_columns_follow_the_daemon_kinds_present(tmp_path):
    db = tmp_path / "srv.db"
    _server_db(db)
    st = Store(db)
    base, gw = load_run(st, "base"), load_run(st, "gw")
    server = ["OSD CPU (% of one core)", "OSD mem (RSS MiB)", "RGW CPU (% of one core)", "RGW mem (RSS MiB)",
              "MDS CPU (% of one core)", "MDS mem (RSS MiB)", "MON CPU (% of one core)", "MON mem (RSS MiB)"]
    d = tables.build([base, gw])
    (sec,) = d.sections
    for t in sec.tables:  # one column pair per kind with data in the section, OSD first, the same in every table
        i = t.headers.index("OSD CPU (% of one core)")
        assert t.headers[i:i + 8] == server and t.headers[i + 8] == "flags"
    rows = {t.title: [dict(zip(t.headers, r)) for r in t.rows] for t in sec.tables}
    g4, b4 = rows["randwrite4k: gw"][1], rows["randwrite4k: base"][1]
    assert (g4["OSD CPU (% of one core)"], g4["RGW CPU (% of one core)"], g4["RGW mem (RSS MiB)"]) == \
        ("320.0", "45.00", "210.0")
    assert (g4["MDS mem (RSS MiB)"], g4["MON CPU (% of one core)"]) == ("33.00", "n/a")
    assert (b4["MON mem (RSS MiB)"], b4["RGW CPU (% of one core)"]) == ("90.00", "n/a")
    # a run on its own shows only its own kinds; OSD always (the study's table has it, n/a where unknown)
    (alone,) = tables.build([load_run(st, "base")]).sections[0].tables
    assert [h for h in alone.headers if "(RSS MiB)" in h] == ["OSD mem (RSS MiB)", "MON mem (RSS MiB)"]
    out = tmp_path / "srv.md"
    run_fathom("report", "base", "gw", "--db", str(db), "-o", str(out), check=True)
    md = out.read_text()
    assert "| " + " | ".join(server) + " | flags |" in md
    html_out = tmp_path / "srv.html"
    run_fathom("report", "base", "gw", "--db", str(db), "-o", str(html_out), check=True)
    assert "".join(f"<th>{h}</th>" for h in server) in html_out.read_text()

def test_markdown_with_svg_files(published_db, tmp_path):
    out = tmp_path / "md" / "study.md"
    p = run_fathom("report", "classic", "seastore", "--db", str(published_db), "-o", str(out), check=True)
    assert "SVG charts" in p.stdout
    text = out.read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+\.svg)\)", text)
    assert len(links) == 12  # 4 workloads x (latency, OSD CPU, efficiency)
    for name in links:
        root = ET.parse(out.parent / name).getroot()  # each file is well-formed standalone SVG
        assert root.tag == f"{SVG_NS}svg"
        assert root.findall(f".//{SVG_NS}path[@class='series']")
    assert "| iodepth | IOPS | total_ios | clat (ms) |" in text
    assert "<details>" in text and "not a size" in text
    assert "The knee is the level with the highest power" in text


def test_bad_output_suffix(published_db, tmp_path):
    p = run_fathom("report", "classic", "--db", str(published_db), "-o", str(tmp_path / "x.pdf"))
    assert p.returncode == 2 and "use .html or .md" in p.stderr


def _chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
         f"--user-data-dir={tmp / 'chromium-profile'}", *args],
        capture_output=True, text=True, timeout=180)


def _png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """Width, height and unfiltered RGB(A) rows of an 8-bit PNG (what Chromium writes)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    w = h = ctype = 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = {2: 3, 6: 4}[ctype]
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, bpp, rows


def _check_renders(html: Path, tmp: Path, min_charts: int) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail("chromium is not installed: `apt-get install chromium` (part of `make install`)")
    dom = _chromium(["--dump-dom", html.as_uri()], tmp)
    assert dom.returncode == 0, dom.stderr[-2000:]
    svgs = re.findall(r"<svg\b.*?</svg>", dom.stdout, re.S)
    drawn = [s for s in svgs if re.search(r'<path class="series"[^>]* d="M[\d.]+ [\d.]+L[\d.]+ [\d.]+', s)]
    assert len(drawn) >= min_charts, f"{len(svgs)} svg elements, {len(drawn)} with drawn lines"
    shot = tmp / "shot.png"
    # tall enough that the first chart is in view however many table rows the data puts above it
    p = _chromium([f"--screenshot={shot}", "--window-size=1280,4000", "--hide-scrollbars", html.as_uri()], tmp)
    assert p.returncode == 0 and shot.exists(), p.stderr[-2000:]
    w, bpp, rows = _png_pixels(shot)
    assert w == 1280
    pixels = [row[i:i + 3] for row in rows[::4] for i in range(0, len(row), bpp * 4)]
    non_white = sum(1 for px in pixels if min(px) < 235)
    assert non_white > len(pixels) * 0.01, "screenshot is blank"
    # a chart line in the palette's blue (#0072B2) must show up, not only text: blue in more columns than a
    # legend swatch spans (16 px). Every pixel is looked at: a 2 px line can fall between sampled rows.
    blue = {i // bpp for row in rows for i in range(0, len(row), bpp)
            if row[i + 2] > 140 and row[i] < 60 and 80 < row[i + 1] < 150}
    assert len(blue) > 60, f"no chart lines in the screenshot (blue in {len(blue)} columns)"


def test_html_renders_in_chromium(published_db, tmp_path):
    out = tmp_path / "study.html"
    run_fathom("report", "classic", "seastore", "--db", str(published_db), "-o", str(out), check=True)
    html = out.read_text()
    assert "http://" not in html.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in html and "<script" not in html  # self-contained, nothing fetched
    assert html.count("<details>") == 2
    _check_renders(out, tmp_path, min_charts=12)


# ---- a real quick osd-classic run ----------------------------------------------------------------
@pytest.fixture(scope="module")
def quick_run(quick_osd_run) -> Path:
    """The session's `fathom run osd-classic --quick` (own disposable cluster, fathom-engine), run name "oc"."""
    return quick_osd_run["db"]


@pytest.mark.cluster
def test_report_of_a_real_quick_run(quick_run, tmp_path):
    st = Store(quick_run)
    run = load_run(st, "oc")
    assert set(run.workloads()) == {"randread4k", "randwrite4k", "seqread64k", "seqwrite64k"}
    out = tmp_path / "quick.html"
    p = run_fathom("report", "oc", "--db", str(quick_run), "-o", str(out), check=True)
    assert "4 workloads" in p.stdout
    d = tables.build([run])
    for row in d.summary.rows:
        s = dict(zip(d.summary.headers, row))
        assert s["peak throughput"] != "n/a" and s["peak at"] != "n/a" and s["knee at"] != "n/a"
    for sec in d.sections:
        t, osd, why = sec.tables  # the points, the latency inside the OSDs beside the client's, what bounds each
        assert why.title.endswith("what bounds each point") and len(why.rows) == len(t.rows), why.title
        assert all(dict(zip(why.headers, r))["bound"] in ("cpu", "network", "client", "latency") for r in why.rows)
        h = t.headers
        for r in t.rows:
            row = dict(zip(h, r))
            assert row["clat (ms)"] != "n/a"
            assert row["p99 (ms)"] != "n/a"  # measured runs carry percentiles from histograms
            assert row["OSD CPU (% of one core)"] != "n/a" and row["OSD mem (RSS MiB)"] != "n/a"
        assert osd.title.endswith("latency inside the OSDs") and len(osd.rows) >= len(t.rows), osd.title
        for r in osd.rows:
            row = dict(zip(osd.headers, r))
            assert int(row["OSD ops"]) > 0 and row["OSD p99 (ms)"].split("–")[1] != "n/a", row
    html = out.read_text()
    assert "Environment" in html and "<details>" in html
    _check_renders(out, tmp_path, min_charts=8)


@pytest.mark.cluster
def test_compare_a_real_run_with_itself(quick_run):
    p = run_fathom("compare", "oc", "oc", "--db", str(quick_run), "--format", "json",
                   "--fail-on-regression", "1%")
    assert p.returncode == 0, p.stderr
    import json
    out = json.loads(p.stdout)
    # one trial each: no verdict, however alike (an identical run says nothing about noise), and no regression
    assert {w["verdict"] for w in out["workloads"]} == {"no verdict (1 trial)"}
    assert all(w["ratio"] == pytest.approx(1.0) for w in out["workloads"])
    assert all(lv["tp"]["ratio"] == pytest.approx(1.0) for w in out["workloads"] for lv in w["levels"])


@pytest.mark.parametrize("lo, hi", [(0, 17373), (0, 15000), (0, 99.9), (1.5, 9.7), (0, 0.003), (-4, 31)])
def test_axis_ticks_reach_the_data(lo, hi):
    """The last tick is the axis end: a curve must never run past it (it did at 17,373 IOPS on a 15k axis)."""
    from fathom.report.svg import linear_ticks

    ticks = linear_ticks(lo, hi)
    assert ticks[0] <= lo and ticks[-1] >= hi
    assert ticks[-2] < hi  # and no empty step beyond the data
    steps = {round(b - a, 9) for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1
