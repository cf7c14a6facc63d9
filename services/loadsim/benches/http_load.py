"""Load client of benches/http_front.rs: N speech calls, C at a time, through aiohttp.

    http_load.py SPEECH_URL API_KEY VOICE N C

Prints one JSON object: {"ok": calls answered 200 with audio, "other": {status: count},
"seconds": wall time from the first call to the last answer}.
"""

import asyncio
import json
import sys
import time

import aiohttp


async def main(url, key, voice, n, c):
    gate = asyncio.Semaphore(c)
    body = {"model": "tts-1", "voice": voice, "input": "One of many calls.", "response_format": "pcm"}
    headers = {"Authorization": f"Bearer {key}"}
    ok, other = 0, {}
    connector = aiohttp.TCPConnector(limit=c)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one():
            nonlocal ok
            async with gate:
                async with session.post(url, json=body, headers=headers) as r:
                    audio = await r.read()
                    if r.status == 200 and audio:
                        ok += 1
                    else:
                        other[str(r.status)] = other.get(str(r.status), 0) + 1

        start = time.monotonic()
        await asyncio.gather(*(one() for _ in range(n)))
        seconds = time.monotonic() - start
    print(json.dumps({"ok": ok, "other": other, "seconds": seconds}))


if __name__ == "__main__":
    url, key, voice, n, c = sys.argv[1:6]
    asyncio.run(main(url, key, voice, int(n), int(c)))
