"""What a run reads, as one notion: a source (``sources.source``) asked for in one place by what the user
named (``sources.open.open_source``): a table in memory, files (span exports among them), a Phoenix project,
or a day of the landing location. Above ``traces`` and ``tables``, whose readers it composes, and below
``settings``: the entry points pass it what their settings say."""
