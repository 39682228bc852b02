"""
SIGHUP reloads the SLA lanes' settings: rtxd started with a config file whose [lane.NAME] and
[scheduler] sections are then edited. After SIGHUP the running schedulers use the new target,
weight and queue bound (`rtxctl --json lanes`), Admin.Config lists them with origin "reload"
(mutable; executors, max_running and cost_keys are not), and one "lanes reconfigured" log
line names what changed. A file that changes the set of lanes applies no lane setting (a
warning says why) but the rest of the reload; a file with a bad lane value changes nothing.
rtxd keeps serving throughout.
"""

import json
import signal
import time

import harness as h

BEFORE = """
[lane.realtime]
target_p99_us = 60000

[lane.batch]
max_queued = 40

[scheduler]
default_cost_us = 20000
"""

AFTER = """
[lane.realtime]
target_p99_us = 20000

[lane.batch]
max_queued = 10
weight = 3

[scheduler]
default_cost_us = 20000
cost_ema_alpha = 0.5
"""


def log_records(d, msg):
    """The daemon's JSON log records whose message is msg."""
    out = []
    for line in d.log().splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if rec.get("msg") == msg:
            out.append(rec)
    return out


def lanes_json(d):
    r = h.rtxctl("lanes", "--json", address=d.address, check_rc=0)
    doc = json.loads(r.out)
    return doc, {(ln["device"], ln["lane"]): ln for ln in doc["lanes"]}


def wait_for(what, cond, d):
    end = time.monotonic() + 10 * h.SLOW
    while not cond():
        assert d.alive(), f"rtxd died on SIGHUP (exit {d.proc.poll()}){d.log_excerpt()}"
        assert time.monotonic() < end, f"after SIGHUP: no {what}{d.log_excerpt()}"
        time.sleep(0.05)


def test_sighup_reconfigures_lanes(make_daemon, tmp_path):
    ini = tmp_path / "rtxd.ini"
    ini.write_text(BEFORE)
    d = make_daemon("reload-lanes", workers=1, config=ini).start()
    c = d.client()
    _, lanes = lanes_json(d)
    assert lanes[("cpu", "realtime")]["target_p99_us"] == 60000
    s = c.config()["lane.realtime.target_p99_us"]
    assert (s.value, s.origin, s.mutable) == ("60000", "file", True), s
    assert not c.config()["scheduler.executors"].mutable

    # the new settings reach the running scheduler and the listing
    ini.write_text(AFTER)
    d.signal(signal.SIGHUP)

    def reloaded():
        s = d.client().config()["lane.realtime.target_p99_us"]
        return s.value == "20000" and s.origin == "reload"

    wait_for("lane.realtime.target_p99_us = 20000 (reload) in Admin.Config", reloaded, d)
    conf = c.config()
    assert (conf["lane.batch.weight"].value, conf["lane.batch.weight"].origin) == ("3", "reload")
    assert conf["lane.batch.max_queued"].value == "10"
    assert (conf["scheduler.cost_ema_alpha"].value,
            conf["scheduler.cost_ema_alpha"].origin) == ("0.5", "reload")
    assert conf["lane.interactive.weight"].origin == "default"
    doc, lanes = lanes_json(d)
    rt, batch = lanes[("cpu", "realtime")], lanes[("cpu", "batch")]
    assert rt["target_p99_us"] == 20000, rt
    assert batch["weight"] == 3 and batch["max_queued"] == 10, batch
    assert doc["schedulers"][0]["executors"] == 1  # the device's own, not the file's
    (rec,) = log_records(d, "lanes reconfigured")
    for part in ("lane.realtime.target_p99_us=60000->20000", "lane.batch.weight=1->3",
                 "lane.batch.max_queued=40->10", "scheduler.cost_ema_alpha=0.2->0.5"):
        assert part in rec["changed"], rec
    r = h.rtxctl("lanes", address=d.address, check_rc=0)
    row = next(ln.split() for ln in r.out.splitlines() if ln.split()[:2] == ["cpu", "realtime"])
    assert row[2] == "20.0ms" and row[3] == "8", r.out
    d.assert_serving()

    # a new lane: no lane setting applies, the rest of the reload does
    ini.write_text(AFTER.replace("target_p99_us = 20000", "target_p99_us = 30000")
                   + "\n[lane.bulk]\nweight = 1\n\n[drain]\ngrace_ms = 1234\n")
    d.signal(signal.SIGHUP)

    def grace_reloaded():
        s = d.client().config()["drain.grace_ms"]
        return s.value == "1234" and s.origin == "reload"

    wait_for("drain.grace_ms = 1234 (reload)", grace_reloaded, d)
    assert c.config()["lane.realtime.target_p99_us"].value == "20000"
    assert "lane.bulk.weight" not in c.config()
    _, lanes = lanes_json(d)
    assert lanes[("cpu", "realtime")]["target_p99_us"] == 20000
    assert ("cpu", "bulk") not in lanes
    (warn,) = log_records(d, "the set of lanes changes only at restart; lane settings not "
                             "applied")
    assert warn["configured"] == "realtime,interactive,batch,bulk", warn
    d.assert_serving()

    # a bad lane value: the whole reload fails, nothing changes
    ini.write_text(AFTER.replace("weight = 3", "weight = 0").replace(
        "target_p99_us = 20000", "target_p99_us = 40000"))
    d.signal(signal.SIGHUP)
    wait_for("reload failure in the log",
             lambda: log_records(d, "reload failed; settings unchanged"), d)
    (fail,) = log_records(d, "reload failed; settings unchanged")
    assert "weight" in fail["error"], fail
    assert c.config()["lane.realtime.target_p99_us"].value == "20000"
    _, lanes = lanes_json(d)
    assert lanes[("cpu", "realtime")]["target_p99_us"] == 20000
    assert lanes[("cpu", "batch")]["weight"] == 3
    d.assert_serving()
    d.stop()
