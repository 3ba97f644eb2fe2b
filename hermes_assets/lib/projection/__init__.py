"""Hermes sessions -> the rows of the three datasets (SPEC §3-§5), pure and deterministic.

The same store gives the same rows; the only outside look-ups (git, §5.8) go
through an injected resolver (:mod:`.context`). One session is projected whole,
from one read, into the buffers of all three datasets:

* :mod:`.header`: what every canonical row of a session shares (provider,
  cwd or channel, git, attributes) and the typed input of the builders;
* :mod:`.content`: content cells decoded (envelopes, data URIs, SPEC §5.4);
* :mod:`.parts`: each message expanded into its parts (§5.2, tool calls §5.3);
* :mod:`.end_row`: the session-end row (§5.2, D4);
* :mod:`.gateway`: the canonical rows' column buffers and :func:`.gateway.project_session`;
* :mod:`.raw`: the ``hermes_sessions`` / ``hermes_messages`` rows (§3, §4);
* :mod:`.copies`, :mod:`.display`, :mod:`.extra_columns`: copies (D20), display
  kinds (D21) and the columns of a newer Hermes (D22).
"""
