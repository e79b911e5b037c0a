"""The Interceptors wire contract (spec §1-§4): events, descriptors, invoke params, results, errors.

Pure pydantic models and predicates; nothing here does IO.
"""
