"""Curate: repository filters, safe fetching, code extraction, licenses, redaction, dedup, F1 shards.

The stage functions (``plan_curate``, ``curate_shard``, ``dedup_corpus``, ``publish_shard``,
``gate_f1``, ``run_curate_stage``) live in :mod:`scicodepile.curate.stage`.
"""
