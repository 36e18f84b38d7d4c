"""Run under the 2.11 environment, with the webserver's environment.

``setup_users.py users SPEC``: before the webserver starts, the app as the
webserver builds it (which loads the plugin's view and creates its
permissions), then the test roles and users through FAB's security manager,
and the ``lease_default`` Connection in the metadata DB. One process instead
of a dozen ``airflow roles``/``users``/``connections`` commands, which each
pay Airflow's import time and cannot name a DAG not yet parsed. SPEC is a
JSON file {"roles": {role: [[action, resource], ...]}, "users": {name:
[role, password]}, "store_uri": URI}.

``setup_users.py connection URI``: points ``lease_default`` at URI, as an
operator editing it under Admin -> Connections would; the page resolves it on
every request."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from airflow.models import Connection
from airflow.utils.session import create_session


def set_connection(uri: str) -> None:
    with create_session() as session:
        session.query(Connection).filter(Connection.conn_id == "lease_default").delete()
        session.add(Connection(conn_id="lease_default", uri=uri))


def users(spec_file: str) -> None:
    from airflow.www.app import create_app

    spec = json.loads(Path(spec_file).read_text())
    app = create_app(testing=True)
    with app.app_context():
        sm = app.appbuilder.sm
        for role_name, perms in spec["roles"].items():
            role = sm.find_role(role_name) or sm.add_role(role_name)
            for action, resource in perms:
                sm.add_permission_to_role(role, sm.create_permission(action, resource))
        for user, (role_name, password) in spec["users"].items():
            made = sm.add_user(user, user, "T", f"{user}@example.invalid", sm.find_role(role_name),
                               password)
            assert made, f"user {user} was not created"
    set_connection(spec["store_uri"])
    print("roles, users and the lease_default Connection ready")


if __name__ == "__main__":
    {"users": users, "connection": set_connection}[sys.argv[1]](sys.argv[2])
