// node-postgres on its own against idgen (docs/clients.md), after knex_orders.js made the table:
// 1,000 rows more inserted with RETURNING, every key read back, and what a browser's JSON does to
// them. Prints one JSON line, every id as a string.
//   node keys.js <socket dir> <port> <database>
'use strict';
const { Client } = require('pg');

async function main([host, port, database]) {
  const client = new Client({ host, port: Number(port), database, user: 'postgres' });
  await client.connect();
  const direct = await client.query(
    "INSERT INTO orders (customer) SELECT 'pg ' || g FROM generate_series(1, 1000) g RETURNING id");
  const stored = await client.query('SELECT id, base62_encode(id) AS code FROM orders ORDER BY id');
  await client.end();

  const ids = stored.rows.map((r) => r.id);
  // An API that sends ids as JSON numbers: what a browser's JSON.parse gives back
  const asNumbers = JSON.parse(JSON.stringify(ids.map((id) => Number(id))));
  const roundedAway = asNumbers.filter((n, i) => BigInt(Math.round(n)) !== BigInt(ids[i])).length;
  // The recommended forms: the id as text, or its base62 code (decoded by base62_decode())
  const asText = JSON.parse(JSON.stringify(ids));
  const codes = JSON.parse(JSON.stringify(stored.rows.map((r) => r.code)));
  console.log(JSON.stringify({
    pg_direct_type: typeof direct.rows[0].id,
    pg_direct: direct.rows.map((r) => r.id),
    stored: ids,
    json_numbers_changed: roundedAway,
    json_numbers_distinct: new Set(asNumbers).size,
    text_intact: asText.every((s, i) => s === ids[i]),
    codes,
  }));
}

main(process.argv.slice(2)).catch((e) => { console.error(e); process.exit(1); });
