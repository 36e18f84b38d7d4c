"""The "Leases" page in the Airflow UI: an Airflow plugin (``plugin.py``) that
mounts a small FastAPI app (``app.py``) under ``/leases`` and puts it in the
Browse menu and on every DAG's tabs.

Airflow gives plugin apps no authentication of their own, so every route
depends on Airflow's ``get_user`` (``auth.py``); pages are rendered on the
server (``render.py``) because the UI's iframes block dialogs, and those on
DAG tabs run no scripts at all. Nothing here is imported by tasks: the package
loads only inside the api-server.
"""
