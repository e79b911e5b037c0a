"""An approval webhook receiver for the e2e tests (starlette on uvicorn): checks the gateway's HMAC-SHA256
signature as docs/guards.md describes it (written independently of the gateway's code), notes each question
in a JSON-lines file, and answers as its `--mode` says.

Modes: accept, decline (signed answers naming who answered), bad-signature (signed with another secret),
wrong-id (an answer to another question), slow (answers after 30 s), error (HTTP 500). Callback modes answer
202 and then POST the signed answer to the question's `callback_url`, noting each callback's HTTP status:
callback-accept, callback-decline, callback-bad-signature (then the same answer signed right: 409 expected if it
got through), callback-unknown-id (to another id first), callback-late (after the question expired, then again).

    python approval_webhook_receiver.py --port P --secret S --mode accept --log questions.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json

import anyio
import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

HEADER = "X-MCPI-Signature"


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def app_for(secret: str, mode: str, log: str) -> Starlette:
    async def post(url: str, answer: dict[str, object], key: str) -> None:
        raw = json.dumps(answer).encode()
        async with httpx2.AsyncClient() as client:
            response = await client.post(url, content=raw, headers={HEADER: signature(key, raw)})
        async with await anyio.open_file(log, "a", encoding="utf-8") as out:
            await out.write(json.dumps({"callback": url.rsplit("/", 1)[-1], "status": response.status_code}) + "\n")

    async def call_back(asked: dict[str, object]) -> None:
        url = str(asked["callback_url"])
        action = "decline" if mode == "callback-decline" else "accept"
        answer = {"id": asked["id"], "action": action, "content": {}, "answered_by": "ops@example.com"}
        if mode == "callback-unknown-id":
            other = {**answer, "id": "no-such-question"}
            await post(url.rsplit("/", 1)[0] + "/no-such-question", other, secret)
        if mode == "callback-bad-signature":
            await post(url, answer, "not-the-shared-secret")
        if mode == "callback-late":
            await anyio.sleep(4)
        await post(url, answer, secret)
        if mode in ("callback-accept", "callback-late"):
            await post(url, answer, secret)  # a second answer

    async def question(request: Request) -> Response:
        body = await request.body()
        signed = hmac.compare_digest(request.headers.get(HEADER, ""), signature(secret, body))
        asked = json.loads(body)
        async with await anyio.open_file(log, "a", encoding="utf-8") as out:
            await out.write(json.dumps({"signed": signed, "question": asked}) + "\n")
        if not signed:
            return Response("bad signature", status_code=401)
        if mode == "error":
            return Response("oops", status_code=500)
        if mode == "slow":
            await anyio.sleep(30)
        if mode.startswith("callback-"):
            return Response(status_code=202, background=BackgroundTask(call_back, asked))
        action = "decline" if mode == "decline" else "accept"
        answer = {"id": "someone-else" if mode == "wrong-id" else asked["id"], "action": action, "content": {}}
        answer["answered_by"] = "ops@example.com"
        raw = json.dumps(answer).encode()
        key = "not-the-shared-secret" if mode == "bad-signature" else secret
        return Response(raw, media_type="application/json", headers={HEADER: signature(key, raw)})

    return Starlette(routes=[Route("/approvals", question, methods=["POST"])])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args()
    uvicorn.run(app_for(args.secret, args.mode, args.log), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
