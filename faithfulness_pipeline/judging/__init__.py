"""Judge adapters: implementations of :class:`faithfulness_pipeline.core.port.Judge`.

Import the concrete judges from their modules (``judges.offline``, ``judges.litellm_judge``);
this package marker imports nothing so that loading the offline judge never pulls in litellm.
"""
