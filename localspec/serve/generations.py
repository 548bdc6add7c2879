"""One generation at a time. One pair of KV caches means one reply generating: a request waits
its turn in a bounded FIFO (``Generations.admit``: past ``--queue`` it is refused), and each reply
runs through ``Session.chat`` on the server's one llama.cpp thread (``llama_thread``), which hands
every engine Step to the event loop (``ReplyChannel``) and checks between steps whether the
client has gone; if so it closes the generator, which stops the reply at the next step and frees
the turn.

Why one thread, the load's too: ggml's CPU backend runs an evaluation in an OpenMP team of the
calling thread, and each thread that ever evaluated keeps its team. Once libgomp manages more
threads than there are CPUs it cuts its spin at barriers from 300,000 rounds to 100, so every
barrier of every evaluation sleeps on a futex. A pair loaded on the main thread and replies on
threads of their own were three threads on two CPUs: 1,400 context switches a second, 12-17 %
slower decoding than ``localspec run`` and llama-server (``scripts/vs_llama_server.py``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait

from ..core.protocol import common_prefix
from .api import ApiError, Job

log = logging.getLogger(__name__)


class ReplyChannel:
    """One generation's hand-off from the worker thread to the event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.items: asyncio.Queue = asyncio.Queue()
        self.cancelled = threading.Event()
        self.prompt_tokens = 0
        self.cache_n = 0  # prompt tokens already in the target's KV cache
        self.baseline_tps = float("nan")  # target-only tokens/s, read when the reply ends
        self.stopped = False  # the worker stopped early because the client had gone
        self.streamed = False  # the reply is an event stream (a client leaving it is logged here)
        self.drafting = None  # the controller's DraftingState when the reply ended

    def put(self, item) -> None:
        """From the worker: a Step, an exception, or None at the end."""
        try:
            self.loop.call_soon_threadsafe(self.items.put_nowait, item)
        except RuntimeError:  # the event loop has closed: nobody is listening any more
            self.cancelled.set()

    async def next(self):
        # a fast worker can fill the queue faster than one loop pass: yield to the loop once
        # per item anyway, so a disconnect (and every other connection) is seen in time
        await asyncio.sleep(0)
        item = await self.items.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop at the next step (a no-op once the reply is complete)."""
        self.cancelled.set()


class Ticket:
    """A place in line, given back once (whichever of the response or the handler ends first)."""

    def __init__(self, line: Generations) -> None:
        self.line = line
        self.open = True

    def close(self) -> None:
        if self.open:
            self.open = False
            self.line.admitted -= 1


def llama_thread() -> ThreadPoolExecutor:
    """The one thread that loads the pair, generates every reply and closes it (the module
    docstring)."""
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="localspec-llama")


class Generations:
    """Runs replies one at a time on ``llama`` (``llama_thread``), up to ``queue`` more waiting in
    order."""

    def __init__(self, session, queue: int, llama: ThreadPoolExecutor | None = None) -> None:
        self.session = session
        self.queue = queue
        self.llama = llama or llama_thread()
        self.admitted = 0  # running + waiting
        self.served = 0
        self.cancelled = 0
        self._turn: asyncio.Lock | None = None  # made on the server's own event loop
        self._reply: Future | None = None

    @property
    def turn(self) -> asyncio.Lock:
        if self._turn is None:
            self._turn = asyncio.Lock()  # FIFO: waiters are woken in the order they came
        return self._turn

    def admit(self) -> Ticket | None:
        """A place in line, or None when the queue is full."""
        if self.admitted > self.queue:
            return None
        self.admitted += 1
        return Ticket(self)

    async def start(self, job: Job) -> ReplyChannel:
        """Wait for the turn, start the reply, and return once its prompt is known to fit
        (an ApiError otherwise, before any response is sent)."""
        await self.turn.acquire()
        run = ReplyChannel(asyncio.get_running_loop())
        self._reply = self.llama.submit(self._work, job, run)  # from here on the worker gives the turn back
        try:
            await run.next()  # None once the prompt is tokenized and checked
        except BaseException:
            run.close()
            raise
        return run

    def _work(self, job: Job, run: ReplyChannel) -> None:
        try:
            budget = self._budget(job, run)
            run.put(None)
            if run.cancelled.is_set():
                run.stopped = True
                return
            steps = self.session.chat(
                job.messages,
                job.params,
                budget,
                mode=job.mode,
                raw=job.raw,
                stop=job.stop,
                draft_max=job.draft_max,
                p_min=job.p_min,
                # what drafting may win: the max_tokens asked for, else the usual reply's length
                expected_tokens=None if job.max_tokens else self.session.expected_reply(),
            )
            try:
                for step in steps:
                    run.put(step)
                    if run.cancelled.is_set() and not step.finish:
                        run.stopped = True
                        break
            finally:
                steps.close()  # the engine's state is consistent between steps
                run.baseline_tps = self.session.baseline_tokens_per_second
                run.drafting = self.session.drafting_state(job.mode, job.draft_max, job.params)
        except Exception as e:
            run.put(e)
        finally:
            run.put(None)
            try:
                run.loop.call_soon_threadsafe(self._finished, run)
            except RuntimeError:  # the server has shut down: there is no turn left to give back
                pass

    def _budget(self, job: Job, run: ReplyChannel) -> int:
        """Tokens the reply may have: what was asked, cut to the room left in the context."""
        ids = self.session.prompt_tokens(job.messages, job.raw)
        n_ctx = self.session.target.n_ctx
        if not ids:
            raise ApiError(400, "the prompt is empty", param="prompt")
        if len(ids) >= n_ctx:
            raise ApiError(
                400,
                f"the prompt is {len(ids)} tokens, and the context holds {n_ctx}: "
                "shorten the request or restart the server with a larger --ctx",
                param="messages" if job.kind == "chat" else "prompt",
                code="context_length_exceeded",
            )
        run.prompt_tokens = len(ids)
        run.cache_n = common_prefix(self.session.target.cached, ids[:-1])  # what the prefill reuses
        room = n_ctx - len(ids)
        return min(job.max_tokens or room, room)

    def _finished(self, run: ReplyChannel) -> None:
        self.served += 1
        self.cancelled += run.stopped
        if run.stopped and run.streamed:  # a client that leaves otherwise is logged as ClientGone
            log.info("a client left mid-stream: its reply stopped at the next step")
        self.turn.release()

    def drain(self, timeout: float | None = None) -> None:
        """Wait for the worker (a reply stops at its next step once its client has gone)."""
        if self._reply is not None:
            wait([self._reply], timeout)
