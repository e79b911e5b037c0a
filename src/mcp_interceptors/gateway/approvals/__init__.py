"""Asking a person to approve an escalated call: the client's user through elicitation in its own era (or a
webhook), the answers judged, approvals remembered, and each answer recorded in the call's receipt.

`asking.Approvals` is what the forwarder uses; `verdicts` what the governor gets from it; `answers` judges
an answer (pure); `memory` keeps approvals (one small protocol, in memory here); `rounds` holds the
`input_required` rounds of 2026-07-28 clients; `webhook` asks for clients that cannot be asked themselves.
Nothing is imported here: the governor imports `verdicts` alone, and `asking` imports the governor.
"""
