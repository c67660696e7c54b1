"""One `requests.Session` per client, retrying transient failures with backoff.

Retried: read errors (a connection dropped mid-answer) and HTTP 429 / 500 / 502 / 503 / 504,
RETRIES times with exponential backoff (waits 0, 2, 4, 8 x BACKOFF_S: 3.5 s in all) or as long as
the server's Retry-After says; the last answer is returned as it is, so callers report the final
status code. A connection that cannot be made (refused, no such host) is tried CONNECT_RETRIES more
time, at once: nothing listening is an answer, and waiting 3.5 s for it four times over only
delays the one-line error that names the host. Requests through one session reuse its pooled
connections (HTTP keep-alive).
"""
from __future__ import annotations

RETRIES = 4
CONNECT_RETRIES = 1
BACKOFF_S = 0.25
RETRY_STATUSES = (429, 500, 502, 503, 504)


def retrying_session():
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util.retry import Retry

    retry = Retry(total=RETRIES, connect=CONNECT_RETRIES, backoff_factor=BACKOFF_S,
                  status_forcelist=RETRY_STATUSES,
                  respect_retry_after_header=True, raise_on_status=False)
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session
