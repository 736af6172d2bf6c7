"""What DStream inputs and stateful streams keep in a checkpoint directory to be replayed after a restart.

Input descriptors, the file-selection log and the receiver write-ahead log (Spark's
``FileInputDStream`` checkpoint data and ``WriteAheadLog``, in Structured Streaming's formats).
"""

from ._input_logs import (
    BLOCK_HEADER,
    BLOCK_HEADER_V1,
    BlockLog,
    FileSelection,
    FileSelectionLog,
    InputDescriptor,
    checkpoint_has_offsets,
    decode_block,
    format_log_offset,
    parse_log_offset,
)

__all__ = [
    "BLOCK_HEADER",
    "BLOCK_HEADER_V1",
    "BlockLog",
    "FileSelection",
    "FileSelectionLog",
    "InputDescriptor",
    "checkpoint_has_offsets",
    "decode_block",
    "format_log_offset",
    "parse_log_offset",
]
