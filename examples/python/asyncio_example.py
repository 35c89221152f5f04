# Waiting for an op from asyncio: `await event` in place of event.wait(), so the event loop
# keeps serving other coroutines while the device works; plus ev.wait_all_async / wait_any_async and a failure raised through await.
import asyncio
import sys

import eventide as ev


async def heartbeat(stop: asyncio.Event, beats: list) -> None:
    while not stop.is_set():
        beats.append(1)
        await asyncio.sleep(0.001)


async def main() -> int:
    a = ev.rand(1024, 1024)
    b = ev.rand(1024, 1024)
    stop, beats = asyncio.Event(), []
    hb = asyncio.create_task(heartbeat(stop, beats))

    # Start the product and tie a new event to it.
    output = ev.matmul(a, b)
    event = ev.Event()
    event.record(output)

    # Wait for it without blocking the loop.
    await event
    print(output, f"({len(beats)} heartbeats while waiting)")

    # Several events at once.
    output1, output2 = ev.matmul(a, b), ev.matmul(b, a)
    event1, event2 = ev.Event(), ev.Event()
    event1.record(output1)
    event2.record(output2)
    await asyncio.gather(event1, event2)
    await ev.wait_all_async([event1, event2])
    first = await ev.wait_any_async([event1, event2])
    print("first finished:", first, f"{event1.time_elapsed():.0f} us, {event2.time_elapsed():.0f} us")

    # A host-side event that gates device work, failed by the host: await raises.
    gate = ev.UserEvent()
    s = ev.Stream()
    s.wait(gate)
    with s:
        gated = ev.matmul(a, b)
    gated_event = ev.Event()
    gated_event.record(gated)
    asyncio.get_running_loop().call_later(0.05, gate.fail, TimeoutError("input never came"))
    try:
        await gated_event
        print("the gated work should have failed")
        return 1
    except ev.OpError as exc:
        print("gated work failed as expected:", type(exc.__cause__).__name__, exc.__cause__)

    stop.set()
    await hb
    if not (event.completed and event1.completed and event2.completed):
        return 1
    if first not in (0, 1) or not beats:
        return 1
    print("ok")
    return 0


sys.exit(asyncio.run(main()))
