"""Judge adapters: implementations of :class:`faithfulness_pipeline.core.port.Judge`.

Import the concrete judges from their modules (``judging.offline.judge``, ``judging.llm.judge``);
this package marker imports nothing so that loading the offline judge never pulls in litellm.
"""
