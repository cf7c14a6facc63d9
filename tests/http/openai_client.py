"""The official OpenAI Python SDK against voxpool's HTTP front, for tests/http_front.rs.

Every call goes through the SDK (no hand-written HTTP); what the SDK saw is printed as one
JSON line per result on stdout, for the Rust test to assert on.

    openai_client.py list   BASE_URL API_KEY
    openai_client.py speak  BASE_URL API_KEY   # stdin: one line '{"voice": ..., "input": ..., ...}'
    openai_client.py hold   BASE_URL API_KEY   # the same; first bytes, then wait for a second line, then close
    openai_client.py many   BASE_URL API_KEY N # the same; N calls at once (AsyncOpenAI)

The body goes on stdin, not in an argument: a test's oversized input would not fit one.

A `"_headers"` object in the body is sent as request headers (`extra_headers`), not in the
body. `speak` with `"stream_format": "sse"` reads the event stream and reports its event types and
the audio bytes the deltas carried. Errors print the SDK's exception class, the HTTP status,
the OpenAI error body and the Retry-After header.
"""

import asyncio
import base64
import json
import sys

import httpx
import openai


def out(value):
    print(json.dumps(value), flush=True)


def client(base_url, api_key):
    # No retries: the test asserts the first answer, not the SDK's retry of a 429 or 5xx.
    return openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=60)


def params(spec):
    p = {"model": "tts-1"}
    p.update(spec)
    return p


def failure(e):
    return {
        "class": type(e).__name__,
        "status": e.status_code,
        "body": e.body,
        "retry_after": e.response.headers.get("retry-after"),
    }


def speak(c, spec):
    p = params(spec)
    # Headers of the request itself (`X-Stainless-Timeout`, ...), as a caller sets them.
    headers = p.pop("_headers", None)
    if headers:
        p["extra_headers"] = headers
    try:
        if p.get("stream_format") == "sse":
            types, audio = [], 0
            with c.audio.speech.with_streaming_response.create(**p) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        event = json.loads(line[len("data: "):])
                        types.append(event["type"])
                        audio += len(base64.b64decode(event.get("audio", "")))
                return {"status": r.status_code, "content_type": r.headers.get("content-type"),
                        "events": types, "audio_bytes": audio}
        r = c.audio.speech.with_raw_response.create(**p)
        body = r.content
        return {"status": r.status_code, "content_type": r.headers.get("content-type"),
                "pool": r.headers.get("x-voxpool-pool"), "bytes": len(body), "head": body[:4].hex()}
    except openai.APIStatusError as e:
        return failure(e)
    except openai.APITimeoutError:
        # The SDK gave up waiting (its own timeout, 60 s): the server never answered in time.
        return {"class": "APITimeoutError"}


def main():
    mode, base_url, api_key = sys.argv[1:4]
    c = client(base_url, api_key)
    if mode == "list":
        voices = c.get("/audio/voices", cast_to=httpx.Response).json()
        out({"voices": voices["data"], "models": [m.id for m in c.models.list()]})
    elif mode == "speak":
        out(speak(c, json.loads(sys.stdin.readline())))
    elif mode == "hold":
        with c.audio.speech.with_streaming_response.create(**params(json.loads(sys.stdin.readline()))) as r:
            # The iterator stays referenced: a dropped generator would close the response early.
            chunks = r.iter_bytes()
            first = next(chunks)
            out({"status": r.status_code, "first_bytes": len(first)})
            sys.stdin.readline()
        # Leaving the block closes the unfinished response: the client went away.
        out({"closed": True})
    elif mode == "many":
        spec, n = json.loads(sys.stdin.readline()), int(sys.argv[4])
        out(asyncio.run(many(base_url, api_key, spec, n)))
    else:
        sys.exit(f"unknown mode {mode}")


async def many(base_url, api_key, spec, n):
    c = openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0, timeout=120)

    async def one():
        try:
            r = await c.audio.speech.create(**params(spec))
            return 200 if r.content else 0
        except openai.APIStatusError as e:
            return e.status_code

    results = await asyncio.gather(*(one() for _ in range(n)))
    counts = {}
    for status in results:
        counts[str(status)] = counts.get(str(status), 0) + 1
    return {"statuses": counts}


if __name__ == "__main__":
    main()
