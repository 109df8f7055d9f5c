mod configure;
mod apply;
mod e2e;
mod generate;
mod golden;
mod ratelimit;
mod template;
