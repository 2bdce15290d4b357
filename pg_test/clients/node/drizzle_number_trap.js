// The trap docs/clients.md warns of, shown failing: the same table read through a Drizzle schema
// whose key is bigint('id', { mode: 'number' }) (a JavaScript number, a double): the ids come
// back rounded, distinct ids equal, and paging by the rounded key does not end (stopped at 101
// pages here). And a row with a BigInt key cannot be JSON.stringify'd. Run after
// drizzle_orders.js, against its table. Prints one JSON line.
//   node drizzle_number_trap.js <socket dir> <port> <database>
'use strict';
const { desc, lt, sql } = require('drizzle-orm');
const { drizzle } = require('drizzle-orm/node-postgres');
const { bigint, pgTable, text } = require('drizzle-orm/pg-core');
const exact = require('./drizzle/schema').orders;

const orders = pgTable('orders', {
  id: bigint('id', { mode: 'number' }).primaryKey().default(sql`snowflake_next()`),
  customer: text('customer').notNull(),
});

async function main([host, port, database]) {
  const db = drizzle({ connection: { host, port: Number(port), database, user: 'postgres' } });
  const ids = (await db.select({ id: orders.id }).from(orders).orderBy(orders.id)).map((r) => r.id);
  const text = (await db.select({ id: sql`id::text` }).from(orders).orderBy(orders.id)).map((r) => r.id);
  // paging by the rounded key, each row's exact key read beside it (at most 101 pages)
  const walk = [];
  let pages = 0;
  for (let cursor; pages <= 100;) {
    const page = await db.select({ id: orders.id, exact: sql`id::text` }).from(orders)
      .where(cursor === undefined ? undefined : lt(orders.id, cursor))
      .orderBy(desc(orders.id)).limit(100);
    if (page.length === 0) break;
    pages += 1;
    walk.push(...page.map((r) => r.exact));
    cursor = page[page.length - 1].id;
  }
  let stringify;
  try {
    JSON.stringify((await db.select().from(exact).limit(1))[0]);
    stringify = 'ok';
  } catch (e) {
    stringify = `${e.name}: ${e.message}`;
  }
  await db.$client.end();
  console.log(JSON.stringify({
    type: typeof ids[0],
    rows: ids.length,
    distinct: new Set(ids).size,
    wrong: ids.filter((n, i) => BigInt(n) !== BigInt(text[i])).length,
    pages,
    walk,
    stringify,
  }));
}

main(process.argv.slice(2)).catch((e) => { console.error(e); process.exit(1); });
