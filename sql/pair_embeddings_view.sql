-- Readers' view for Spark SQL: decodes the packed `embedding` column (little-endian float32 bytes)
-- into `embedding_array` array<float>, in pure SQL (IEEE-754 single precision, finite values only,
-- which is all the tables ever hold). Register the table first as the temp view `pair_embeddings_raw`:
--   spark.read.format("delta").load(".../pair_embeddings").createOrReplaceTempView("pair_embeddings_raw")
-- (solaris.storage.tables.register_decoded_view does both). Python readers use solaris.storage.embedding_codec.decode.
CREATE OR REPLACE TEMP VIEW pair_embeddings_decoded AS
SELECT *,
  transform(
    transform(
      sequence(0, CAST(octet_length(embedding) / 4 AS INT) - 1),
      i -> CAST(conv(concat(substr(hex(substring(embedding, 4 * i + 1, 4)), 7, 2),
                            substr(hex(substring(embedding, 4 * i + 1, 4)), 5, 2),
                            substr(hex(substring(embedding, 4 * i + 1, 4)), 3, 2),
                            substr(hex(substring(embedding, 4 * i + 1, 4)), 1, 2)), 16, 10) AS BIGINT)
    ),
    bits -> CAST(
      (CASE WHEN bits >= 2147483648 THEN -1.0D ELSE 1.0D END) *
      (CASE WHEN ((bits >> 23) & 255) = 0
            THEN (bits & 8388607) / 8388608.0D * power(2.0D, -126)
            ELSE (1.0D + (bits & 8388607) / 8388608.0D) * power(2.0D, ((bits >> 23) & 255) - 127)
       END) AS FLOAT)
  ) AS embedding_array
FROM pair_embeddings_raw
