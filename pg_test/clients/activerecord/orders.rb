# ActiveRecord and idgen (docs/clients.md): a migration makes the extension and the table with the
# key's DEFAULT, the model's create! and insert_all read the keys back. Debian's ruby-activerecord and
# ruby-pg. Prints one JSON line.
#   ruby orders.rb <socket dir> <port> <database>
require "active_record"
require "json"

host, port, database = ARGV
ActiveRecord::Base.establish_connection(adapter: "postgresql", host: host, port: port.to_i,
                                        database: database, username: "postgres")
ActiveRecord::Migration.verbose = false

class CreateOrders < ActiveRecord::Migration[6.1]
  def change
    enable_extension "idgen"  # the functions the DEFAULTs call, before the table
    # the key the database makes: DEFAULT snowflake_next(), and RETURNING "id" on insert
    create_table :orders, id: :bigint, default: -> { "snowflake_next()" } do |t|
      t.uuid :ref, null: false, default: -> { "uuid_v7()" }
      t.text :customer, null: false
    end
  end
end

class Order < ActiveRecord::Base
end

CreateOrders.migrate(:up)
one = Order.create!(customer: "ada")                 # INSERT ... RETURNING "id"
rows = (1..1000).map { |i| { customer: "c#{i}" } }
many = Order.insert_all(rows, returning: %w[id])     # every key
puts JSON.generate(
  one: one.id, one_ref_before_reload: one.ref, one_ref: one.reload.ref, id_class: one.id.class.name,
  many: many.rows.map(&:first),
  extension: Order.connection.extension_enabled?("idgen"),
  default: Order.connection.select_value(
    "SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'orders'::regclass AND adnum = 1"),
  version: ActiveRecord::VERSION::STRING
)
