"""Run once under the 2.11 environment before the webserver starts: the app
as the webserver builds it (which loads the plugin's view and creates its
permissions), then the test roles and users, through FAB's security manager.
One process instead of a dozen ``airflow roles``/``users`` commands, which
each pay Airflow's import time and cannot name a DAG not yet parsed.

argv: a JSON file {"roles": {role: [[action, resource], ...]},
"users": {name: [role, password]}}."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from airflow.www.app import create_app

spec = json.loads(Path(sys.argv[1]).read_text())
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
print("roles and users ready")
