"""The basics every step of the core uses: typed errors, deterministic ids, structlog
set-up, the datasets' Arrow schemas and Hermes's time cells. They import nothing else of
the core."""
