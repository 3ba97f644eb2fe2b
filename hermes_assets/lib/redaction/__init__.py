"""Credentials out of every text cell before any row is built, and out of the files written before.

The run (:mod:`~hermes_assets.lib.capture`) reads a day, hands its sessions' cells
here, and projects what comes back; the projection never sees a secret and never
imports this package. One room for the idea:

* :mod:`.rules`: what counts as a secret (credential formats, assignments whose name says secret);
* :mod:`.sources`: what a run's redaction reads (the key, the values of Hermes's ``.env`` files);
* :mod:`.redactor`: the :class:`~.redactor.Redactor` (one RE2 screen per column, then the rules) and its markers;
* :mod:`.session_cells`: a session's cells as read, redacted in place;
* :mod:`.stored_files`: the pass over stored files (a file written before, or under another redaction);
* :mod:`.sightings`: where each secret was seen.

Sightings. Every marker the redactor writes is also reported as a
:class:`~.sightings.Sighting`: the marker, the kind of the rule that found it, the
field it was in (``<table>.<column>`` as read from Hermes, ``<dataset>.<column>`` in
a stored file), the JSON path inside a JSON cell (array indexes as ``[*]``, ``""`` for
plain text), the session id, the message id (None for a session's own cells), the
store's label, and what lets a person recognise their key without the warehouse
holding it: the provider's literal ``prefix`` when the rule has one (``ghp_``), and
``last4``, the secret's last four characters (none for a secret under 16
characters). Never the secret. The caller says which cell it redacts
(:attr:`Redactor.where <.redactor.Redactor.where>`, or a ``where`` function to
:meth:`~.redactor.Redactor.redact_column`) and takes what was seen with
:meth:`~.redactor.Redactor.take_sightings`. A capture carries them per day
(:attr:`StagedDay.sightings <hermes_assets.lib.capture.staged_run.StagedDay.sightings>`,
from :func:`.session_cells.redact_bundles`) and per run
(:meth:`ProjectedRun.sightings() <hermes_assets.lib.capture.staged_run.ProjectedRun.sightings>`,
which also holds those of :func:`.stored_files.redact_files`); nothing writes them
yet.
"""
