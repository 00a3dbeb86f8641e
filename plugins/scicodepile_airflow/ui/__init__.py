"""The SciCodePile page in the Airflow UI: a FastAPI app plus a nav entry (an external view)."""
