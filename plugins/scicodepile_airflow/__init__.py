"""Airflow glue for SciCodePile: default args, Assets, Connections -> settings, the UI page."""
