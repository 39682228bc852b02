"""gen_client.py - the open-loop streaming client of bench/bench_generate.py and its statistics.

Standard library only (the GPU machine has no aiohttp or httpx): http.client in threads,
spread over a few processes so that reading thousands of Server-Sent Events a second is not
held back by one interpreter's lock.

A run is a list of Request objects, each with the time it is due (seconds after the run's
start), its OpenAI /v1/completions body (stream true, stream_options.include_usage true) and
its SLA lane (sent as the `x-rtx-lane` header and the body's "lane"). drive() starts the
processes, each sends its share of the requests at their due times (dealt round robin in
order of due time: together they send exactly the list given, so a Poisson stream stays
one), every request on its own connection and thread, and returns one Result per request, in
the order given.

What a Result measures (time.monotonic(), CLOCK_MONOTONIC, one clock for every process):
  sent         when the request was written (due + the client's lag)
  ttft         sent -> the first chunk carrying a token (a chunk with a choice; the usage
               chunk has none, and a last chunk that only says finish_reason with no text is
               not a token when the chunks outnumber usage.completion_tokens)
  token_times  the arrival of each chunk carrying tokens; ITL = the gaps between them (as
               vLLM's benchmark measures it: a chunk that carried k tokens counts once)
  tpot         (last token - first token) / (completion_tokens - 1)
  status       the HTTP status (429: refused by admission control), 0 when no answer came
A request is `shed` when the server's SLA policy turned it away: refused at admission (429),
or expired, dropped when its deadline passed before it was scheduled (rtxd answers that with
an error whose message says "deadline"; a lane's deadline is its latency target). Shed
requests are the server keeping its promises to others, not failures; every other request
that was not served is `failed`. A request still streaming at its client-side deadline is
closed (the server cancels it) and marked `aborted`; its tokens until then still count toward
throughput.
"""
import http.client
import json
import math
import multiprocessing
import socket
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field

LANE_HEADER = "x-rtx-lane"
EXPIRED_TEXT = "deadline"  # in rtxd's message for a request that expired before its turn


@dataclass
class Request:
    due: float               # seconds after the run's start
    body: dict               # the /v1/completions body
    lane: str = ""           # "" leaves the server's default lane
    deadline: float = 0.0    # seconds after the start when the client closes it; 0: none
    tag: str = ""            # the scenario's name for it (statistics are per tag)


@dataclass
class Result:
    tag: str = ""
    lane: str = ""
    due: float = 0.0                 # absolute monotonic time it was due
    sent: float = 0.0                # absolute monotonic time it was sent
    status: int = 0
    error: str = ""
    ttft: float | None = None        # seconds
    token_times: list = field(default_factory=list)  # absolute monotonic times
    end: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    chunks: int = 0
    aborted: bool = False

    @property
    def ok(self):
        return self.status == 200 and not self.error and self.completion_tokens > 0

    @property
    def expired(self):
        return not self.ok and EXPIRED_TEXT in self.error.lower()

    @property
    def shed(self):
        return self.status == 429 or self.expired

    @property
    def itl(self):
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:])]

    @property
    def tpot(self):
        if self.completion_tokens < 2 or len(self.token_times) < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (self.completion_tokens - 1)


# ------------------------------------------------------------------------------------------
# Server-Sent Events
# ------------------------------------------------------------------------------------------

def sse_data(line):
    """The payload of one SSE line: a dict, "[DONE]", or None (not a data line, a comment,
    an empty line). ValueError for a data line that is not JSON."""
    if isinstance(line, bytes):
        line = line.decode("utf-8", errors="replace")
    line = line.rstrip("\r\n")
    if not line.startswith("data:"):
        return None
    payload = line[5:].strip()
    if payload == "[DONE]":
        return payload
    return json.loads(payload)


def read_events(lines, res, clock=time.monotonic):
    """Folds an event stream (an iterable of lines, bytes or str) into res: usage, the time
    of each chunk that carries tokens, an error event, then ttft. A trailing chunk that only
    says finish_reason (no text) is not a token when the chunks outnumber the tokens usage
    reports."""
    state = {"usage_seen": False, "last": None}
    try:
        _fold(lines, res, clock, state)
    finally:  # also when the stream breaks (a request closed at its deadline): count what came
        _finish(res, state["usage_seen"], state["last"])


def _fold(lines, res, clock, state):
    """read_events' loop: folds lines into res and state (usage seen, the last choice)."""
    for line in lines:
        try:
            ev = sse_data(line)
        except ValueError:
            res.error = f"not JSON in the stream: {line[:200]!r}"
            break
        if ev is None or not isinstance(ev, (dict, str)):
            continue
        if ev == "[DONE]":
            break
        now = clock()
        if "error" in ev:
            e = ev["error"]
            res.error = e.get("message", str(e)) if isinstance(e, dict) else str(e)
            break
        usage = ev.get("usage")
        if usage:
            state["usage_seen"] = True
            res.prompt_tokens = int(usage.get("prompt_tokens", 0))
            res.completion_tokens = int(usage.get("completion_tokens", 0))
            details = usage.get("prompt_tokens_details") or {}
            res.cached_tokens = int(details.get("cached_tokens", 0) or 0)
        choices = ev.get("choices") or []
        if choices:
            res.chunks += 1
            res.token_times.append(now)
            state["last"] = (choices[0].get("text") or "", choices[0].get("finish_reason"))


def _finish(res, usage_seen, last):
    """The end of read_events: drops a trailing finish-only chunk, counts tokens without a
    usage chunk, sets ttft."""
    if (res.completion_tokens and len(res.token_times) > res.completion_tokens and last
            and last[0] == "" and last[1] is not None):
        res.token_times.pop()
    if not usage_seen:
        res.completion_tokens = len(res.token_times)
    if res.token_times:
        res.ttft = res.token_times[0] - res.sent


# ------------------------------------------------------------------------------------------
# one request, one process's share, a run
# ------------------------------------------------------------------------------------------

def send(host, port, req, res, start, timeout=600.0):
    """Sends req (due at start + req.due) and fills res. At req.deadline a watchdog shuts the
    connection down (the server then cancels the request) and the result is `aborted`."""
    body = dict(req.body)
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if req.lane:
        headers[LANE_HEADER] = req.lane
        body["lane"] = req.lane
    data = json.dumps(body).encode()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    watchdog = None

    def abort():
        res.aborted = True
        if conn.sock:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    try:
        if req.deadline:
            watchdog = threading.Timer(max(0.0, start + req.deadline - time.monotonic()), abort)
            watchdog.start()
        res.sent = time.monotonic()
        conn.request("POST", "/v1/completions", body=data, headers=headers)
        resp = conn.getresponse()
        res.status = resp.status
        if resp.status != 200:
            text = resp.read().decode("utf-8", errors="replace")
            try:
                e = json.loads(text).get("error", text)
                res.error = e.get("message", str(e)) if isinstance(e, dict) else str(e)
            except (ValueError, AttributeError):
                res.error = text[:300]
            return
        read_events(iter(resp.readline, b""), res)
    except (OSError, http.client.HTTPException, ValueError) as e:
        if not res.aborted:
            res.error = f"{type(e).__name__}: {e}"
    finally:
        if watchdog:
            watchdog.cancel()
        res.end = time.monotonic()
        conn.close()


def _share(host, port, reqs, start, pipe):
    """One process: sends its requests at their due times, one thread each, and sends back
    the results as dicts."""
    results = [Result(tag=r.tag, lane=r.lane, due=start + r.due) for r in reqs]
    threads = []
    for r, res in zip(reqs, results):
        wait = start + r.due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        t = threading.Thread(target=send, args=(host, port, r, res, start), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    pipe.send([asdict(res) for res in results])
    pipe.close()


def drive(host, port, reqs, procs=4, lead=0.5):
    """Sends reqs (open loop, each at its due time) from `procs` processes; returns (their
    Results in the order of reqs, the run's start). The run starts `lead` seconds from now
    (the processes start meanwhile)."""
    if not reqs:
        return [], time.monotonic()
    order = sorted(range(len(reqs)), key=lambda i: reqs[i].due)
    procs = max(1, min(procs, len(reqs)))
    ctx = multiprocessing.get_context("fork")
    start = time.monotonic() + lead
    parts, pipes = [], []
    for i in range(procs):
        rd, wr = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_share, args=(host, port, [reqs[j] for j in order[i::procs]],
                                             start, wr), daemon=True)
        p.start()
        wr.close()
        parts.append(p)
        pipes.append(rd)
    got = [rd.recv() for rd in pipes]
    for p in parts:
        p.join()
    out = [None] * len(reqs)
    for i, part in enumerate(got):
        for j, d in zip(order[i::procs], part):
            out[j] = Result(**d)
    return out, start


# ------------------------------------------------------------------------------------------
# arrivals and statistics
# ------------------------------------------------------------------------------------------

def poisson_times(rate, duration, rng):
    """Arrival times (seconds from 0) of a Poisson process of `rate` per second over
    [0, duration); rng is a random.Random."""
    t, out = 0.0, []
    if rate <= 0:
        return out
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        out.append(t)


def percentile(values, q):
    """The q-th percentile (0..100) with linear interpolation (numpy's default); None when
    empty. Values may be math.inf."""
    v = sorted(values)
    if not v:
        return None
    k = (len(v) - 1) * q / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    if lo == hi or v[lo] == math.inf:  # an infinite value (a request not served) stays one
        return v[lo]
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def summarize(results, slo_ttft=None):
    """The figures of one set of results: counts, TTFT/ITL/TPOT p50 and p99 (ms), output
    tokens/s over the span from the first send to the last answer, and goodput (tokens/s and
    requests/s of requests whose TTFT met each target of slo_ttft, {name: seconds})."""
    ok = [r for r in results if r.ok]
    refused = sum(1 for r in results if r.status == 429)
    expired = sum(1 for r in results if r.expired)
    failed = [r for r in results if not r.ok and not r.shed and not r.aborted]
    aborted = sum(1 for r in results if r.aborted)
    sent = [r.sent for r in results if r.end]
    ends = [r.end for r in results if r.end]
    span = (max(ends) - min(sent)) if sent and ends else 0.0
    tokens = sum(r.completion_tokens if r.completion_tokens else len(r.token_times)
                 for r in results if r.status == 200)
    ttft = [r.ttft for r in ok if r.ttft is not None]
    itl = [g for r in ok for g in r.itl]
    tpot = [r.tpot for r in ok if r.tpot is not None]
    lag = [r.sent - r.due for r in results if r.end]
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    s = {
        "requests": len(results), "completed": len(ok), "refused": refused, "expired": expired,
        "failed": len(failed), "aborted": aborted,
        "errors": sorted({r.error for r in failed if r.error})[:5],
        "span_s": span, "output_tokens": tokens,
        "output_tokens_per_s": tokens / span if span > 0 else 0.0,
        "requests_per_s": len(ok) / span if span > 0 else 0.0,
        "prompt_tokens": sum(r.prompt_tokens for r in ok),
        "cached_tokens": sum(r.cached_tokens for r in ok),
        "tokens_per_chunk": (sum(r.completion_tokens for r in ok) /
                             max(1, sum(len(r.token_times) for r in ok))),
        "client_lag_p99_ms": ms(percentile(lag, 99)),
    }
    for name, vals in (("ttft", ttft), ("itl", itl), ("tpot", tpot)):
        for q in (50, 99):
            s[f"{name}_p{q}_ms"] = ms(percentile(vals, q))
        s[f"{name}_mean_ms"] = ms(statistics.fmean(vals)) if vals else None
    s["goodput"] = {}
    for name, target in (slo_ttft or {}).items():
        good = [r for r in ok if r.ttft is not None and r.ttft <= target]
        s["goodput"][name] = {
            "ttft_target_ms": target * 1e3,
            "requests_per_s": len(good) / span if span > 0 else 0.0,
            "output_tokens_per_s": (sum(r.completion_tokens for r in good) / span
                                    if span > 0 else 0.0),
            "share": len(good) / len(results) if results else 0.0,
        }
    return s
