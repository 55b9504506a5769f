//! The methods a layer around a store passes on as they are, written once: a layer names them
//! in `forward!(inner; method, ...)` inside its `impl Store` and writes only the methods it
//! changes.

/// Writes the named [`Store`](crate::store::Store) methods of a layer as calls of the same
/// method on its field `$inner` (an `Arc<dyn Store>`).
macro_rules! forward {
    ($inner:ident; $($method:ident),* $(,)?) => {
        $( $crate::store::forward::forward!(@ $inner $method); )*
    };
    (@ $inner:ident describe) => {
        fn describe(&self) -> &str {
            self.$inner.describe()
        }
    };
    (@ $inner:ident server) => {
        fn server(&self) -> &str {
            self.$inner.server()
        }
    };
    (@ $inner:ident gate) => {
        fn gate<'a>(&'a self, key: &'a $crate::store::Key) -> Option<$crate::store::BoxFuture<'a, ()>> {
            self.$inner.gate(key)
        }
    };
    (@ $inner:ident fair) => {
        fn fair(&self) -> bool {
            self.$inner.fair()
        }
    };
    (@ $inner:ident supports) => {
        fn supports(&self, shape: $crate::store::Shape) -> Result<(), &'static str> {
            self.$inner.supports(shape)
        }
    };
    (@ $inner:ident leave) => {
        fn leave<'a>(
            &'a self,
            key: &'a $crate::store::Key,
            token: &'a str,
        ) -> $crate::store::BoxFuture<'a, Result<(), $crate::store::StoreError>> {
            self.$inner.leave(key, token)
        }
    };
    (@ $inner:ident release) => {
        fn release<'a>(
            &'a self,
            key: &'a $crate::store::Key,
            token: &'a str,
            keep: std::time::Duration,
        ) -> $crate::store::BoxFuture<'a, Result<$crate::store::Release, $crate::store::StoreError>> {
            self.$inner.release(key, token, keep)
        }
    };
    (@ $inner:ident release_lease) => {
        fn release_lease<'a>(
            &'a self,
            lease: &'a $crate::store::Lease,
            keep: std::time::Duration,
        ) -> $crate::store::BoxFuture<'a, Result<$crate::store::Release, $crate::store::StoreError>> {
            self.$inner.release_lease(lease, keep)
        }
    };
    (@ $inner:ident hands_off) => {
        fn hands_off(&self) -> bool {
            self.$inner.hands_off()
        }
    };
    (@ $inner:ident hand_off) => {
        fn hand_off<'a>(
            &'a self,
            from: &'a $crate::store::Lease,
            to: &'a $crate::store::Lease,
        ) -> $crate::store::BoxFuture<'a, Result<$crate::store::HandOff, $crate::store::StoreError>> {
            self.$inner.hand_off(from, to)
        }
    };
    (@ $inner:ident notifies) => {
        fn notifies(&self) -> bool {
            self.$inner.notifies()
        }
    };
    (@ $inner:ident attach) => {
        fn attach(&self, changes: &$crate::store::Changes) {
            self.$inner.attach(changes);
        }
    };
    (@ $inner:ident watch) => {
        fn watch<'a>(
            &'a self,
            key: &'a str,
        ) -> $crate::store::BoxFuture<'a, Result<(), $crate::store::StoreError>> {
            self.$inner.watch(key)
        }
    };
    (@ $inner:ident unwatch) => {
        fn unwatch(&self, key: &str) {
            self.$inner.unwatch(key);
        }
    };
    (@ $inner:ident announces) => {
        fn announces(&self) -> bool {
            self.$inner.announces()
        }
    };
    (@ $inner:ident announce) => {
        fn announce<'a>(
            &'a self,
            notice: &'a $crate::store::Notice,
        ) -> $crate::store::BoxFuture<'a, Result<(), $crate::store::StoreError>> {
            self.$inner.announce(notice)
        }
    };
    (@ $inner:ident steals) => {
        fn steals(&self) -> bool {
            self.$inner.steals()
        }
    };
    (@ $inner:ident steal) => {
        fn steal<'a>(
            &'a self,
            key: &'a $crate::store::Key,
            token: &'a str,
            ttl: std::time::Duration,
            from: &'a str,
        ) -> $crate::store::BoxFuture<'a, Result<$crate::store::Stolen, $crate::store::StoreError>> {
            self.$inner.steal(key, token, ttl, from)
        }
    };
    (@ $inner:ident keeps_waits) => {
        fn keeps_waits(&self) -> bool {
            self.$inner.keeps_waits()
        }
    };
    (@ $inner:ident waits) => {
        fn waits<'a>(
            &'a self,
            key: &'a str,
            update: &'a $crate::store::WaitsUpdate,
        ) -> $crate::store::BoxFuture<'a, Result<Vec<(String, String)>, $crate::store::StoreError>>
        {
            self.$inner.waits(key, update)
        }
    };
    (@ $inner:ident retry_with_same_token) => {
        fn retry_with_same_token(&self) -> bool {
            self.$inner.retry_with_same_token()
        }
    };
    (@ $inner:ident inspect) => {
        fn inspect(&self) -> Option<&dyn $crate::store::Inspect> {
            self.$inner.inspect()
        }
    };
}

pub(crate) use forward;
