"""
Learned costs across a restart (issue 12): rtxd keeps the schedulers' learned run times in the
device set's book of learned costs, which persists them in the store's sched_costs table. Jobs
run, rtxd stops and the CPU's row is in the store; a row of another consumer (serving's
"infer") is read and left as it was; the next start loads the job costs back ("learned costs
loaded"), and a second stop writes nothing it did not learn.
"""

import sqlite3

import harness as h


def rows(d):
    with sqlite3.connect(d.store) as db:
        return {(dev, key): (ema, n) for dev, key, ema, n in db.execute(
            "SELECT device, cost_key, ema_ns, samples FROM sched_costs")}


def test_learned_costs_survive_a_restart(make_daemon):
    d = make_daemon()
    d.start()
    for seed in range(3):
        h.check_tiny_job(d.client(), seed=seed)
    d.stop()
    saved = rows(d)
    cpu = {k: v for k, v in saved.items() if k[0] == "cpu"}
    assert len(cpu) == 1, saved
    (_, (ema, samples)), = cpu.items()
    assert ema > 0 and samples == 3, saved
    with sqlite3.connect(d.store) as db:  # a served version's row, as serving writes it
        db.execute("INSERT INTO sched_costs(device, cost_key, ema_ns, samples, updated_ms) "
                   "VALUES ('infer', 12345, 999, 7, 1)")

    d.restart()
    assert "learned costs loaded" in d.log(), d.log_excerpt()
    d.stop()
    after = rows(d)
    assert after[("infer", 12345)] == (999, 7), after
    assert {k: v for k, v in after.items() if k[0] == "cpu"} == cpu, after
