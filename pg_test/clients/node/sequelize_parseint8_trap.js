// The trap docs/clients.md warns of, shown failing: pg.defaults.parseInt8 = true, the common
// "fix" for Sequelize's string ids, makes node-postgres parse every bigint into a JavaScript
// number (a double): the ids come back rounded, distinct ids equal, and paging by the rounded key
// loses rows or repeats them, or does not end (stopped at 101 pages). Also records the INSERTs Sequelize sends. Run after
// sequelize_orders.js, against its table. Prints one JSON line.
//   node sequelize_parseint8_trap.js <socket dir> <port> <database>
'use strict';
require('pg').defaults.parseInt8 = true;
const { DataTypes, Op, Sequelize } = require('sequelize');

async function main([host, port, database]) {
  const sent = [];
  const sequelize = new Sequelize({ dialect: 'postgres', host, port: Number(port), database,
                                    username: 'postgres', logging: (s) => sent.push(s) });
  const Order = sequelize.define('Order', {
    id: { type: DataTypes.BIGINT, primaryKey: true, defaultValue: Sequelize.literal('snowflake_next()') },
    customer: { type: DataTypes.TEXT, allowNull: false },
  }, { tableName: 'orders', timestamps: false });
  const [two] = await Order.bulkCreate([{ customer: 'x' }, { customer: 'y' }], { returning: ['id'] });
  const ids = (await Order.findAll({ attributes: ['id'], order: [['id', 'ASC']] })).map((r) => r.id);
  const [text] = await sequelize.query('SELECT id::text AS id FROM orders ORDER BY id');
  // paging by the rounded key, each row's exact key read beside it (at most 101 pages)
  const walk = [];
  let pages = 0;
  for (let cursor; pages <= 100;) {
    const page = await Order.findAll({ attributes: ['id', [sequelize.literal('id::text'), 'exact']],
                                       where: cursor === undefined ? {} : { id: { [Op.lt]: cursor } },
                                       order: [['id', 'DESC']], limit: 100, raw: true });
    if (page.length === 0) break;
    pages += 1;
    walk.push(...page.map((r) => r.exact));
    cursor = page[page.length - 1].id;
  }
  await sequelize.close();
  console.log(JSON.stringify({
    type: typeof two.id,
    rows: ids.length,
    distinct: new Set(ids).size,
    wrong: ids.filter((n, i) => BigInt(n) !== BigInt(text[i].id)).length,
    pages,
    walk,
    insert: sent.find((s) => s.includes('INSERT INTO')),
  }));
}

main(process.argv.slice(2)).catch((e) => { console.error(e); process.exit(1); });
