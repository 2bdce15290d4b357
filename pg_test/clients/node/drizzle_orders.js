// Drizzle ORM and idgen (docs/clients.md): drizzle-kit's migrations make the extension and the
// table, rows go in with insert ... returning, and the keys come back as BigInts, exact; then every
// row is read back a page at a time, the key as the cursor. Prints one JSON line, the ids as
// strings (a BigInt has no JSON form).
//   node drizzle_orders.js <socket dir> <port> <database>
'use strict';
const { desc, lt } = require('drizzle-orm');
const { drizzle } = require('drizzle-orm/node-postgres');
const { migrate } = require('drizzle-orm/node-postgres/migrator');
const { orders } = require('./drizzle/schema');

async function main([host, port, database]) {
  const db = drizzle({ connection: { host, port: Number(port), database, user: 'postgres' } });
  // CREATE EXTENSION IF NOT EXISTS idgen, then CREATE TABLE orders (drizzle/migrations/)
  await migrate(db, { migrationsFolder: `${__dirname}/drizzle/migrations` });
  const [one] = await db.insert(orders).values({ customer: 'ada' }).returning({ id: orders.id });
  const rows = Array.from({ length: 1000 }, (_, i) => ({ customer: `c${i}` }));
  const many = await db.insert(orders).values(rows).returning({ id: orders.id });  // every key, a BigInt
  // latest first, 100 a page: the last key of a page is the cursor of the next
  const pages = [];
  for (let cursor; ;) {
    const page = await db.select({ id: orders.id }).from(orders)
      .where(cursor === undefined ? undefined : lt(orders.id, cursor))
      .orderBy(desc(orders.id)).limit(100);
    if (page.length === 0) break;
    pages.push(page.map((r) => r.id));
    cursor = page[page.length - 1].id;
  }
  await db.$client.end();
  // to a browser: every BigInt as a string
  const json = (value) => JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? v.toString() : v));
  console.log(json({ one: one.id, many: many.map((r) => r.id), pages, type: typeof one.id }));
}

main(process.argv.slice(2)).catch((e) => { console.error(e); process.exit(1); });
