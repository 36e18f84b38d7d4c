"""The "Leases" page in the Airflow UI, an Airflow plugin (``plugin.py``) with
two faces: on Airflow 3 a small FastAPI app (``app.py``) mounted under
``/leases``, in the Browse menu and on every DAG's tabs; on Airflow 2.11 a
Flask AppBuilder view (``fab_view.py``) under Browse.

Both render the same Jinja2 templates (``templates/``, ``layout.py``,
``pages.py``) on the server, because the UI's iframes block dialogs and those
on DAG tabs run no scripts at all; both take the same steps (``actions.py``)
under the same per-DAG rule (``rules.py``). Airflow gives plugin apps no
authentication of their own: each face asks its Airflow for the user
(``auth.py`` on 3.x). Nothing here is imported by tasks: the package loads
only inside the api-server or webserver.
"""
