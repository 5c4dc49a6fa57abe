"""The ceiling of bench/enqueue.py: the enqueue request under the same gunicorn and Flask,
answered by a view that reads the JSON body and stores nothing.

    gunicorn --pythonpath bench floor_app:app
"""

import itertools

from flask import Flask, jsonify, request

app = Flask(__name__)
_ids = itertools.count(1)


@app.post("/api/messages")
def create_message():  # type: ignore[no-untyped-def]
    request.get_json()
    return jsonify(id=next(_ids)), 201
